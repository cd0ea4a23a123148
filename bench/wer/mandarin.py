"""Run: .venv/bin/python -m bench.wer.mandarin (a few minutes).

Mandarin as the app hears it, on the Mandarin set (`assets/zh_set/`, voices no test uses)
and the labelled set's Mandarin clips (`assets/turns/`): character error rate (CER, edits
over the sentence's characters, punctuation left out) and how many transcripts hold
traditional characters, for
- the demo's ASR (tiny.en, Whisper base telling the language), a first Mandarin utterance
  and one in a conversation already speaking Mandarin (`expect="zh"`);
- Whisper base reading Mandarin (`--language zh`), with and without its prompt asking for
  simplified characters (`AsrConfig.zh_prompt`);
each before and after OpenCC's t2s (`AsrConfig.simplify`). Also each path's decode time
(p50), and the language each decided. Writes docs/bench/asr_caps/mandarin.{json,md}."""

import json
import time
from dataclasses import replace

import soundfile as sf

from app.language import simplified
from app.metrics import percentile
from app.paths import MODELS, ROOT
from app.stages.asr import Asr
from app.stages.asr_config import AsrConfig
from assets.make_turn_set import error_rate
from bench.wer import DEMO, record

clips = []
for folder in ("zh_set", "turns"):
    for label in json.loads((ROOT / "assets" / folder / "labels.json").read_text()):
        if label["lang"] == "zh":
            x, _ = sf.read(ROOT / "assets" / folder / label["file"], dtype="float32")
            clips.append((f"{folder}/{label['file']}", label["text"], x))

BASE = AsrConfig(model=str(MODELS / "whisper-base"), language="zh", cpu_threads=2,
                 short_window_s=DEMO.short_window_s)
PATHS = {
    "demo, first Mandarin words": (DEMO, None),
    "demo, a Mandarin conversation": (DEMO, "zh"),
    "base, --language zh": (BASE, None),
    "base, --language zh, no prompt": (replace(BASE, zh_prompt=""), None),
}
results: dict[str, object] = {"clips": len(clips)}
errors = []
for name, (cfg, expect) in PATHS.items():
    asr = Asr(replace(cfg, simplify=False))
    asr.setup()
    raw, after, traditional, times, wrong = [], [], 0, [], 0
    for file, text, x in clips:
        t0 = time.perf_counter()
        heard = asr.process(0, x, expect=expect)
        times.append((time.perf_counter() - t0) * 1000)
        wrong += heard.language != "zh"
        converted = simplified(heard.text)
        traditional += converted != heard.text
        raw.append(error_rate(text, heard.text, "zh"))
        after.append(error_rate(text, converted, "zh"))
        if after[-1] > 0.3 or heard.language != "zh":
            errors.append(f"{name}: {file}: {text} -> {converted} ({heard.language}, "
                          f"CER {after[-1]:.2f})")
    results[f"{name}: CER as Whisper wrote it"] = round(sum(raw) / len(raw), 3)
    results[f"{name}: CER after t2s"] = round(sum(after) / len(after), 3)
    results[f"{name}: transcripts with traditional characters"] = traditional
    results[f"{name}: not taken as Mandarin"] = wrong
    results[f"{name}: decode p50 ms"] = round(percentile(times, 50) or 0.0, 1)
record("mandarin", results, errors)
