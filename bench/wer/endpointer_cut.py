"""Run: .venv/bin/python -m bench.wer.endpointer_cut (about 1 min).

WER of tiny.en on the clips as the app's endpointer cuts them (the last pause's audio of
each utterance) against the whole clips, the same 24 questions."""

import numpy as np

from app.config import VadConfig
from app.messages import MicFrame
from app.vad import Endpointer
from bench.wer import TINY_EN, questions, record, score, whisper

FRAME = 320  # 20 ms, as the page sends them


def pauses(x: np.ndarray) -> list[np.ndarray]:
    """The audio of each `pause` the app's endpointer emits over `x`, in order."""
    ep = Endpointer(VadConfig())
    out = []
    for k in range(0, len(x) - FRAME + 1, FRAME):
        for ev in ep.feed(MicFrame(k // FRAME, x[k : k + FRAME], (k + FRAME) / 16, 0.0)):
            if ev.kind == "pause":
                out.append(ev.audio)
    return out


asr = whisper(TINY_EN)
cuts: dict[str, list] = {"whole clip": [], "endpointer, last pause": [],
                         "endpointer, first pause": []}
for v, q, x in questions():
    x = np.concatenate([np.zeros(16000, np.float32), x, np.zeros(24000, np.float32)])
    cuts["whole clip"].append((v, q, np.concatenate([np.zeros(4000, np.float32), x[12000:]])))
    found = pauses(x)
    if found:
        cuts["endpointer, last pause"].append((v, q, found[-1]))
        cuts["endpointer, first pause"].append((v, q, found[0]))
errors: list[str] = []
record("endpointer_cut", {f"WER, {k}": score(asr, k, c, errors)[0] for k, c in cuts.items()},
       errors)
