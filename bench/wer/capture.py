"""Clips played through Chromium's fake microphone and captured as the page's
getUserMedia gives them (the app's constraints: echo cancellation, noise suppression and
gain control on, or all off)."""

from __future__ import annotations

import base64
import functools
import http.server
import tempfile
import threading
from pathlib import Path

import numpy as np
import soundfile as sf
from playwright.sync_api import sync_playwright

from app.stages.audio import resample
from bench.page import launch

GAP_S = 1.5  # of silence after each clip in the microphone's file
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


def layout(clips: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The microphone's 16 kHz file: a second of silence, then each clip and `GAP_S` of
    silence; and where each clip starts and ends in it (samples)."""
    parts, spans, pos = [np.zeros(16000, np.float32)], [], 16000
    for x in clips:
        spans.append((pos, pos + len(x)))
        parts += [x, np.zeros(int(16000 * GAP_S), np.float32)]
        pos += len(x) + int(16000 * GAP_S)
    return np.concatenate(parts), spans


def capture(orig: np.ndarray, processing: list[bool]) -> list[np.ndarray]:
    """`orig` (16 kHz) played as the fake microphone's file, captured once per setting of
    the page's processing, each at 16 kHz and aligned to `orig` (the file loops: the
    capture is cut where the original's start correlates best)."""
    tmp = Path(tempfile.mkdtemp())
    mic = tmp / "mic.wav"
    sf.write(mic, resample(orig, 16000, 48000), 48000, subtype="PCM_16")
    (tmp / "index.html").write_text("<html><body>x</body></html>")
    h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/index.html"
    out = []
    try:
        with sync_playwright() as pw:
            for on in processing:
                b = launch(pw, mic)
                p = b.new_context(permissions=["microphone"]).new_page()
                p.goto(url)
                data, rate = p.evaluate(JS, [on, len(orig) / 16000 * 2 + 2])
                b.close()
                y = np.frombuffer(base64.b64decode(data), np.int16).astype(np.float32) / 32768
                y = resample(y, int(rate), 16000)
                head, n = y[: 2 * len(orig)], len(orig)
                m = 1 << int(np.ceil(np.log2(len(head) + n)))
                c = np.fft.irfft(np.fft.rfft(head, m) * np.conj(np.fft.rfft(orig, m)), m)
                off = int(np.argmax(c[: len(head) - n + 1]))
                out.append(y[off:off + n])
    finally:
        srv.shutdown()
    return out
