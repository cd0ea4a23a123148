"""Run: .venv/bin/python -m bench.wer.endpointer_cut (about 3 min).

WER of tiny.en on the clips as the app's endpointer cuts them (the last pause's audio of
each utterance) against the whole clips, the same 24 questions, each at three start shifts
(0, 10, 20 ms): for each speculative start (`eager_ms`), whether an earlier start loses
the ends of words."""

import numpy as np

from bench.wer import TINY_EN, pauses, questions, record, score, whisper

EAGER_MS = (128, 96, 64, 32)


asr = whisper(TINY_EN)
cuts: dict[str, list] = {"whole clip": []}
for shift in (0, 160, 320):
    for v, q, x in questions():
        x = np.concatenate([np.zeros(16000 + shift, np.float32), x,
                            np.zeros(24000, np.float32)])
        cuts["whole clip"].append((v, q, np.concatenate([np.zeros(4000, np.float32),
                                                         x[12000:]])))
        for eager in EAGER_MS:
            found = pauses(x, eager)
            if found:
                cuts.setdefault(f"endpointer at {eager} ms, last pause", []).append(
                    (v, q, found[-1]))
errors: list[str] = []
record("endpointer_cut", {f"WER, {k} (3 start shifts)": score(asr, k, c, errors)[0]
                          for k, c in cuts.items()}, errors)
