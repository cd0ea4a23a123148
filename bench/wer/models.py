"""Run: .venv/bin/python -m bench.wer.models (about 2 min). WER of tiny.en and Whisper base
(multilingual, the demo's language detector) on the 24 benchmark clips, each at three start
shifts (0, 10, 20 ms), and the median ASR time."""

import statistics

import numpy as np

from app.paths import MODELS
from bench.wer import TINY_EN, questions, record, score, whisper

clips = [(v, q, np.pad(x, 4000)) for v, q, x in questions()]
results: dict[str, float] = {}
errors: list[str] = []
for name, path in [("tiny.en", TINY_EN), ("base", str(MODELS / "whisper-base"))]:
    asr = whisper(path)
    shifted = [(v, q, x[shift:]) for shift in (0, 160, 320) for v, q, x in clips]
    results[f"WER {name} (3 start shifts)"], took = score(asr, name, shifted, errors)
    results[f"ms per clip {name} (p50)"] = round(statistics.median(took) * 1000)
record("models", results, errors)
