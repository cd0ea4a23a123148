"""Run: .venv/bin/python -m bench.wer.models (about 2 min). WER of tiny.en and Whisper base
(multilingual, the demo's language detector) on the 24 benchmark clips, each at three start
shifts (0, 10, 20 ms), and the median ASR time."""

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from app.config import MODELS
from bench.voice_to_voice import QUESTIONS, VOICES, speak, wer
from bench.wer import TINY_EN, record, whisper

tmp = Path(tempfile.mkdtemp())
clips = []
results: dict[str, float] = {}
errors: list[str] = []
for i, q in enumerate(QUESTIONS):
    for v in VOICES:
        x, _ = sf.read(speak(q, v, tmp / f"q{i}-{v}.wav"), dtype="float32")
        clips.append(
            (q, np.concatenate([np.zeros(4000, np.float32), x * 0.7, np.zeros(4000, np.float32)]))
        )
for name, path in [
    ("tiny.en", TINY_EN),
    ("base", str(MODELS / "whisper-base")),
]:
    asr = whisper(path)
    e = n = 0
    ts = []
    for shift in (0, 160, 320):
        for q, x in clips:
            t0 = time.perf_counter()
            t = asr.process(0, x[shift:]).text
            ts.append(time.perf_counter() - t0)
            a, b = wer(q, t)
            e += a
            n += b
            if a:
                errors.append(f"{name}, shift {shift // 16} ms: {q} -> {t}")
    results[f"WER {name} (3 start shifts)"] = round(e / n, 3)
    results[f"ms per clip {name} (p50)"] = round(statistics.median(ts) * 1000)
record("models", results, errors)
