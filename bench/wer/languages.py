"""Run: .venv/bin/python -m bench.wer.languages (a few minutes).

How the demo's language decision stands on the clips the demo hears: the voice-to-voice
benchmark's questions, the labelled set's English and Mandarin sentences, the Mandarin set
(`assets/zh_set/`) and the committed recordings, each at three start shifts (0, 10, 20 ms).
Per clip: tiny.en's mean log-probability (below `app.stages.asr.UNSURE` the app asks the detector),
the detector's top language and its probability, and the log-odds of Mandarin against
English (`ln p(zh) / p(en)`), which `app.stages.whisper_read.decide_language` decides by where
the detector is short of `app.stages.whisper_read.CERTAIN_LANGUAGE`; then what `Asr.language`
decides. The margin is the gap between the English clips' highest log-odds and the
Mandarin clips' lowest. With AMD's paths (`CT2_USE_MKL=0` and the AVX2 caps in the
environment) it writes languages_amd.*: the numerics differ."""

import json
import math
import os

import numpy as np
import soundfile as sf

from app.paths import ROOT
from app.stages.asr import UNSURE, Asr
from bench.wer import DEMO, TINY_EN, questions, record, whisper

SHIFTS = (0, 160, 320)  # samples at 16 kHz

clips = [("en", f"{q} ({v})", x) for v, q, x in questions()]
for folder in ("turns", "zh_set"):
    labels = ROOT / "assets" / folder / "labels.json"
    for label in json.loads(labels.read_text()) if labels.exists() else []:
        x, _ = sf.read(ROOT / "assets" / folder / label["file"], dtype="float32")
        clips.append((label["lang"], f"{folder}/{label['file']}", x))
for name in ("en_capital.wav", "en_hello.wav", "en_joke.wav", "en_weather.wav",
             "zh_intro.wav", "zh_music.wav", "zh_weather.wav"):
    x, _ = sf.read(ROOT / "assets" / name, dtype="float32")
    clips.append((name[:2], name, x))

asr = Asr(DEMO)
asr.setup()
english = whisper(TINY_EN)  # tiny.en alone: its score
odds: dict[str, list[tuple[float, str]]] = {"en": [], "zh": []}  # ln p(zh)/p(en)
other: list[tuple[float, str]] = []  # the top language where it is not the clip's
wrong = []  # Asr.language's decision, where it is not the clip's language
unsure = {"en": 0, "zh": 0}
for shift in SHIFTS:
    for lang, name, x in clips:
        x = np.concatenate([np.zeros(shift, np.float32), x])
        label = f"{name} +{shift // 16} ms"
        unsure[lang] += english.process(0, x).score < UNSURE
        probs = asr.languages(x)
        top = max(probs, key=probs.get)
        ratio = math.log(max(probs.get("zh", 0.0), 1e-9) / max(probs.get("en", 0.0), 1e-9))
        odds[lang].append((ratio, label))
        if top != lang:
            other.append((probs[top], f"{label}: {top} {probs[top]:.2f}"))
        decided = asr.language(x)
        if decided != lang:
            wrong.append(f"{label}: decided {decided}")
readings = {k: len(v) for k, v in odds.items()}
window = f"{asr.detect_window(clips[0][2]):.0f} s"
en_high, zh_low = max(odds["en"]), min(odds["zh"])
results = {
    "readings (English / Mandarin)": f"{readings['en']} / {readings['zh']}",
    "tiny.en unsure (English / Mandarin readings)": f"{unsure['en']} / {unsure['zh']}",
    f"readings whose top language was not their own ({window} window)": len(other),
    f"highest probability of a wrong top language ({window} window)":
        round(max((p for p, _ in other), default=0.0), 2),
    "English: highest ln p(zh)/p(en)": f"{en_high[0]:.2f} ({en_high[1]})",
    "Mandarin: lowest ln p(zh)/p(en)": f"{zh_low[0]:.2f} ({zh_low[1]})",
    "margin between them": round(zh_low[0] - en_high[0], 2),
    "readings Asr.language decided wrong": len(wrong),
}
amd = os.environ.get("CT2_USE_MKL") == "0"
record("languages_amd" if amd else "languages", results,
       [line for _, line in sorted(other, reverse=True)] + wrong)
