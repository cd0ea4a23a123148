"""Run: .venv/bin/python -m bench.wer.mic_path (about 6 min).

What the page's getUserMedia processing does to the benchmark's questions: WER of tiny.en
on the captured audio, processing on (the app's constraints) vs off, same fake-mic file."""

import numpy as np

from bench.wer import TINY_EN, questions, record, score, whisper
from bench.wer.capture import capture, layout

said = questions()
orig, starts = layout([x for _, _, x in said])


def cut(audio: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """Each question out of `audio` laid out as the microphone file (0.1 s either side,
    then 0.25 s of silence padded)."""
    return [(v, q, np.pad(audio[a - 1600 : z + 1600], 4000))
            for (a, z), (v, q, _) in zip(starts, said, strict=True)]


asr = whisper(TINY_EN)
results: dict[str, float] = {}
errors: list[str] = []
for on, y in zip([True, False], capture(orig, [True, False]), strict=True):
    key = "processing on" if on else "processing off"
    results[f"WER, {key}"] = score(asr, key, cut(y), errors)[0]
    results[f"peak level, {key}"] = round(max(float(np.abs(y[a:z]).max()) for a, z in starts), 3)
results["WER, the file itself"] = score(asr, "the file", cut(orig), errors)[0]
record("mic_path", results, errors)
