"""Run: .venv/bin/python -m bench.wer.windows [SECONDS ...] (about 4 min; default 8 7 6).

The ASR window for short utterances (`--asr-short-window-s`), chosen on what the app
hears: the benchmark's 24 questions and the labelled set's 16 finished English sentences
(assets/turns, other voices) played through Chromium's microphone with the page's
processing on, cut by the app's endpointer (each utterance's last speculative pause), and
transcribed by the demo's ASR (tiny.en, the language told by Whisper base when unsure) with
the 10 s window alone and with each short one given (8, 7 and 6 s by default): WER, ms
per clip, and how many clips looped in the short window and were read again in a longer
one."""

import dataclasses
import json
import logging
import statistics
import sys

import numpy as np
import soundfile as sf

from app.paths import ROOT
from app.stages.asr import Asr
from bench.wer import DEMO, pauses, questions, record, score
from bench.wer.capture import capture, layout


class Reread(logging.Handler):
    """Counts the app's 'reading the N s window' notes: a short window's transcript looped."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "reading the" in record.getMessage()


said = [(v, q, x) for v, q, x in questions()]
for label in json.loads((ROOT / "assets" / "turns" / "labels.json").read_text()):
    if label["lang"] == "en" and label["kind"] == "complete":
        x, _ = sf.read(ROOT / "assets" / "turns" / label["file"], dtype="float32")
        said.append((label["file"], label["text"],
                     x[: int((label["speech_end_s"] + 0.1) * 16000)] * 0.7))
orig, spans = layout([x for _, _, x in said])
(heard,) = capture(orig, [True])
clips = []
for (name, text, _), (a, z) in zip(said, spans, strict=True):
    cut = pauses(heard[a - 16000 : z + 16000])
    if cut:
        clips.append((name, text, cut[-1]))
reread = Reread()
logging.getLogger("app.stages.asr").addHandler(reread)
logging.getLogger("app.stages.asr").setLevel(logging.INFO)
results: dict[str, float] = {"clips cut by the endpointer": len(clips)}
errors: list[str] = []
for short in (0.0, *(float(a) for a in sys.argv[1:] or (8, 7, 6))):
    name = f"{short:g} s window, else 10 s" if short else "10 s window"
    asr = Asr(dataclasses.replace(DEMO, short_window_s=short))
    asr.setup()
    reread.count = 0
    results[f"WER, {name}"], took = score(asr, name, clips, errors)
    ms = [t * 1000 for t in took]
    results[f"ms per clip p50 / p90 / max, {name}"] = " / ".join(
        f"{v:.1f}" for v in (statistics.median(ms), np.percentile(ms, 90), max(ms)))
    results[f"clips read again in a longer window, {name}"] = reread.count
record("_".join(["windows", *sys.argv[1:]]), results, errors)
