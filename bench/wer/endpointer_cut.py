"""Run: .venv/bin/python -m bench.wer.endpointer_cut (about 1 min).

WER of tiny.en on the clips as the app's endpointer cuts them (the last pause's audio of
each utterance) against the whole clips, the same 24 questions."""

import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from app.config import VadConfig
from app.messages import MicFrame
from app.vad import Endpointer
from bench.voice_to_voice import QUESTIONS, VOICES, speak, wer
from bench.wer import TINY_EN, record, whisper

tmp = Path(tempfile.mkdtemp())
errors: list[str] = []
asr = whisper(TINY_EN)
tot = {"endpointer, last pause": [0, 0], "endpointer, first pause": [0, 0], "whole clip": [0, 0]}
for i, q in enumerate(QUESTIONS):
    for v in VOICES:
        x, _ = sf.read(speak(q, v, tmp / f"q{i}-{v}.wav"), dtype="float32")
        x = np.concatenate([np.zeros(16000, np.float32), x * 0.7, np.zeros(24000, np.float32)])
        ep = Endpointer(VadConfig())
        pauses = []
        for k in range(0, len(x) - 320 + 1, 320):
            for ev in ep.feed(MicFrame(k // 320, x[k : k + 320], (k + 320) / 16, 0.0)):
                if ev.kind == "pause":
                    pauses.append(ev.audio)
        outs = {
            "whole clip": asr.process(
                0, np.concatenate([np.zeros(4000, np.float32), x[12000:]])
            ).text
        }
        if pauses:
            outs["endpointer, last pause"] = asr.process(0, pauses[-1]).text
            outs["endpointer, first pause"] = asr.process(0, pauses[0]).text
        for k, t in outs.items():
            e, n = wer(q, t)
            tot[k][0] += e
            tot[k][1] += n
            if e:
                errors.append(f"{k}, {v}, {len(pauses)} pause(s): {q} -> {t}")
record("endpointer_cut", {f"WER, {k}": round(e / n, 3) for k, (e, n) in tot.items()}, errors)
