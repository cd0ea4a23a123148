"""Run: .venv/bin/python -m bench.wer.beam (about 3 min). WER of the demo's tiny.en decoded
greedily (the app's default, beam 1) and by beam search (3, 5) on the 24 benchmark clips,
each at three start shifts (0, 10, 20 ms), and the median ASR time."""

import statistics

import numpy as np

from bench.wer import TINY_EN, questions, record, score, whisper

clips = [(v, q, np.pad(x, 4000)) for v, q, x in questions()]
shifted = [(v, q, x[shift:]) for shift in (0, 160, 320) for v, q, x in clips]
results: dict[str, float] = {}
errors: list[str] = []
for beam in (1, 3, 5):
    asr = whisper(TINY_EN, beam_size=beam)
    results[f"WER beam {beam} (3 start shifts)"], took = score(asr, f"beam {beam}", shifted,
                                                               errors)
    results[f"ms per clip beam {beam} (p50)"] = round(statistics.median(took) * 1000)
record("beam", results, errors)
