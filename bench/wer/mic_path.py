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
from bench.wer import TINY_EN, questions, record, score, whisper

said = questions()
parts, starts = [np.zeros(16000, np.float32)], []
pos = 16000
for _, _, x in said:
    starts.append((pos, pos + len(x)))
    parts += [x, np.zeros(int(16000 * 1.5), np.float32)]
    pos += len(x) + int(16000 * 1.5)
tmp = Path(tempfile.mkdtemp())
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


def cut(audio: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """Each question out of `audio` laid out as the microphone file (0.1 s either side,
    then 0.25 s of silence padded)."""
    return [(v, q, np.pad(audio[a - 1600 : z + 1600], 4000))
            for (a, z), (v, q, _) in zip(starts, said, strict=True)]


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
        head, n = y[: 2 * len(orig)], len(orig)
        m = 1 << int(np.ceil(np.log2(len(head) + n)))
        c = np.fft.irfft(np.fft.rfft(head, m) * np.conj(np.fft.rfft(orig, m)), m)
        c = c[: len(head) - n + 1]
        off = int(np.argmax(c))
        key = "processing on" if on else "processing off"
        results[f"WER, {key}"] = score(asr, key, cut(y[off:]), errors)[0]
        results[f"peak level, {key}"] = round(
            max(float(np.abs(y[off + a : off + z]).max()) for a, z in starts), 3)
results["WER, the file itself"] = score(asr, "the file", cut(orig), errors)[0]
record("mic_path", results, errors)
