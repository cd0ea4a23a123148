"""Run: .venv/bin/python -m bench.wer.mic_path (about 6 min).

What the page's getUserMedia processing does to the benchmark's questions: WER of tiny.en
on the captured audio, processing on (the app's constraints) vs off, same fake-mic file."""

import base64
import functools
import http.server
import tempfile
import threading
from pathlib import Path

import numpy as np
import soundfile as sf
from playwright.sync_api import sync_playwright

from app.audio import resample
from bench.page import launch
from bench.voice_to_voice import QUESTIONS, VOICES, speak, wer
from bench.wer import TINY_EN, record, whisper

tmp = Path(tempfile.mkdtemp())
clips, refs = [], []
for i, q in enumerate(QUESTIONS):
    for v in VOICES:
        clips.append(speak(q, v, tmp / f"q{i}-{v}.wav"))
        refs.append((v, q))
parts, starts = [np.zeros(16000, np.float32)], []
pos = 16000
for c in clips:
    x, _ = sf.read(c, dtype="float32")
    starts.append((pos, pos + len(x)))
    parts += [x * 0.7, np.zeros(int(16000 * 1.5), np.float32)]
    pos += len(x) + int(16000 * 1.5)
orig = np.concatenate(parts)
mic = tmp / "mic.wav"
sf.write(mic, resample(orig, 16000, 48000), 48000, subtype="PCM_16")
dur = len(orig) / 16000
(tmp / "index.html").write_text("<html><body>x</body></html>")
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp))
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
threading.Thread(target=srv.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{srv.server_address[1]}/index.html"
JS = """async ([on, secs]) => {
  const s = await navigator.mediaDevices.getUserMedia({audio: {echoCancellation: on,
     noiseSuppression: on, autoGainControl: on, channelCount: 1}});
  const ctx = new AudioContext();
  const src = ctx.createMediaStreamSource(s);
  const proc = ctx.createScriptProcessor(4096, 1, 1);
  const bufs = [];
  proc.onaudioprocess = e => bufs.push(new Float32Array(e.inputBuffer.getChannelData(0)));
  src.connect(proc); proc.connect(ctx.destination);
  await new Promise(r => setTimeout(r, secs * 1000));
  proc.disconnect(); s.getTracks().forEach(t => t.stop());
  const n = bufs.reduce((a, b) => a + b.length, 0);
  const out = new Int16Array(n); let k = 0;
  for (const b of bufs) for (const v of b) out[k++] = Math.max(-32768, Math.min(32767, v * 32767));
  let bin = ''; const u = new Uint8Array(out.buffer);
  for (let i = 0; i < u.length; i += 8192)
    bin += String.fromCharCode.apply(null, u.subarray(i, i + 8192));
  return [btoa(bin), ctx.sampleRate];
}"""
asr = whisper(TINY_EN)
results: dict[str, float] = {}
errors: list[str] = []
with sync_playwright() as pw:
    for on in [True, False]:
        b = launch(pw, mic)
        ctx = b.new_context(permissions=["microphone"])
        p = ctx.new_page()
        p.goto(url)
        data, rate = p.evaluate(JS, [on, dur * 2 + 2])
        b.close()
        y = np.frombuffer(base64.b64decode(data), np.int16).astype(np.float32) / 32768
        y = resample(y, int(rate), 16000)
        # align: the file loops; find the offset of the original's start in the capture
        n = len(orig)
        m = 1 << int(np.ceil(np.log2(len(y[: 2 * n]) + n)))
        c = np.fft.irfft(np.fft.rfft(y[: 2 * n], m) * np.conj(np.fft.rfft(orig, m)), m)[
            : len(y[: 2 * n]) - n + 1
        ]
        off = int(np.argmax(c))
        edits = words = 0
        rows = []
        for (a, z), (v, q) in zip(starts, refs, strict=True):
            clip = np.concatenate(
                [
                    np.zeros(4000, np.float32),
                    y[off + a - 1600 : off + z + 1600],
                    np.zeros(4000, np.float32),
                ]
            )
            t = asr.process(0, clip).text
            e, w = wer(q, t)
            edits += e
            words += w
            rows.append((v, q, t, float(np.abs(y[off + a : off + z]).max())))
        key = "processing on" if on else "processing off"
        results[f"WER, {key}"] = round(edits / words, 3)
        results[f"peak level, {key}"] = round(max(r[3] for r in rows), 3)
        errors += [
            f"{key}, {r[0]}: {r[1]} -> {r[2]}"
            for r in rows
            if r[1].lower().strip("?.") != r[2].lower().strip("?.").strip()
        ]
# the original clips, for reference
edits = words = 0
for (a, z), (_v, q) in zip(starts, refs, strict=True):
    clip = np.concatenate(
        [np.zeros(4000, np.float32), orig[a - 1600 : z + 1600], np.zeros(4000, np.float32)]
    )
    e, w = wer(q, asr.process(0, clip).text)
    edits += e
    words += w
results["WER, the file itself"] = round(edits / words, 3)
record("mic_path", results, errors)
