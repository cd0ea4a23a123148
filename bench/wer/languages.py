"""Run: .venv/bin/python -m bench.wer.languages (about 2 min).

How sure the demo's language detector (Whisper base) is, on the clips the demo hears: the
voice-to-voice benchmark's questions, the labelled set's English and Mandarin sentences and
the committed recordings, each at three start shifts (0, 10, 20 ms). Per clip: tiny.en's
mean log-probability (below `app.asr.UNSURE` the app asks the detector) and the detector's
top languages, in the demo's window and in the 20 s one `Asr.language` confirms in
(`app.asr.CONFIRM_WINDOW_S`), and what `Asr.language` decides. The result chooses
`app.asr.SURE_LANGUAGE`: the lowest probability of a Mandarin clip's "zh" against the
highest of an English clip's other language. With AMD's paths (`CT2_USE_MKL=0` and the
AVX2 caps in the environment) it writes languages_amd.*: the numerics differ."""

import json
import os

import numpy as np
import soundfile as sf

from app.asr import CONFIRM_WINDOW_S, UNSURE, Asr
from app.config import ROOT
from bench.wer import DEMO, TINY_EN, questions, record, whisper

SHIFTS = (0, 160, 320)  # samples at 16 kHz

clips = [("en", f"{q} ({v})", x) for v, q, x in questions()]
for label in json.loads((ROOT / "assets" / "turns" / "labels.json").read_text()):
    x, _ = sf.read(ROOT / "assets" / "turns" / label["file"], dtype="float32")
    clips.append((label["lang"], label["file"], x))
for name in ("en_capital.wav", "en_hello.wav", "en_joke.wav", "en_weather.wav",
             "zh_intro.wav", "zh_music.wav", "zh_weather.wav"):
    x, _ = sf.read(ROOT / "assets" / name, dtype="float32")
    clips.append((name[:2], name, x))

asr = Asr(DEMO)
asr.setup()
english = whisper(TINY_EN)  # tiny.en alone: its score
own = {"en": [], "zh": []}  # the detector's probability of the clip's own language
other: list[tuple[float, str]] = []  # its top language where that is not the clip's
confirm_own: dict[str, list[float]] = {"en": [], "zh": []}
confirm_other: list[float] = []
wrong = []  # Asr.language's decision, where it is not the clip's language
unsure = {"en": 0, "zh": 0}
for shift in SHIFTS:
    for lang, name, x in clips:
        x = np.concatenate([np.zeros(shift, np.float32), x])
        unsure[lang] += english.process(0, x).score < UNSURE
        probs = asr.languages(x)
        top = max(probs, key=probs.get)
        own[lang].append(probs.get(lang, 0.0))
        if top != lang:
            other.append((probs[top], f"{name} +{shift // 16} ms: {top} {probs[top]:.2f}"))
        wide = asr.languages(x, CONFIRM_WINDOW_S)
        wide_top = max(wide, key=wide.get)
        confirm_own[lang].append(wide.get(lang, 0.0))
        if wide_top != lang:
            confirm_other.append(wide[wide_top])
        decided = asr.language(x)
        if decided != lang:
            wrong.append(f"{name} +{shift // 16} ms: decided {decided}")
readings = {k: len(v) for k, v in own.items()}
window = f"{asr.detect_window(clips[0][2]):.0f} s"
results = {
    "readings (English / Mandarin)": f"{readings['en']} / {readings['zh']}",
    "tiny.en unsure (English / Mandarin readings)": f"{unsure['en']} / {unsure['zh']}",
    f"Mandarin: the detector's zh, lowest ({window} window)": round(min(own["zh"]), 2),
    f"English: the detector's en, lowest ({window} window)": round(min(own["en"]), 2),
    f"readings whose top language was not their own ({window} window)": len(other),
    f"highest probability of a wrong top language ({window} window)":
        round(max((p for p, _ in other), default=0.0), 2),
    f"Mandarin: zh, lowest ({CONFIRM_WINDOW_S:.0f} s window)": round(min(confirm_own["zh"]), 2),
    f"highest probability of a wrong top language ({CONFIRM_WINDOW_S:.0f} s window)":
        round(max(confirm_other, default=0.0), 2),
    "readings Asr.language decided wrong": len(wrong),
}
amd = os.environ.get("CT2_USE_MKL") == "0"
record("languages_amd" if amd else "languages", results,
       [line for _, line in sorted(other, reverse=True)] + wrong)
