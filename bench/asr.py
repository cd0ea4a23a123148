"""ASR latency and word error rate: Whisper's 30 s window against the app's 10 s and 7 s ones.

  .venv/bin/python -m bench.asr [--model tiny.en|base]

One model, three `app.stages.asr.Asr` instances that differ only in their windows (30 s:
faster-whisper's own `transcribe`, which pads every input to 30 s; 10 s alone, the app's
default; `--asr-short-window-s 7`: 7 s for a clip that fits it and 10 s else). Clips:
the committed English recordings, the voice-to-voice benchmark's espeak-ng questions (two
voices) and the labelled turn set's English sentences (assets/turns, other voices,
2-6 s), each transcribed 4 times per window, windows alternating (first run dropped), on
2 threads.
Writes docs/bench/asr_cpu.json and .md; prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from app.ops.machine import describe, machine
from app.ops.prepare import tiny_en_dir
from app.paths import MODELS, ROOT
from app.stages.asr import Asr
from app.stages.asr_config import AsrConfig
from bench.voice_to_voice import QUESTIONS, VOICES, speak, wer


def clips(tmp: Path) -> list[tuple[str, str, np.ndarray]]:
    truth = json.loads((ROOT / "assets" / "transcripts.json").read_text())
    out = []
    for name in sorted(c for c in truth if c.startswith("en_") and "48k" not in c):
        x, _ = sf.read(ROOT / "assets" / name, dtype="float32")
        out.append((name, truth[name], x))
    for i, q in enumerate(QUESTIONS):
        for v in VOICES:
            path = speak(q, v, tmp / f"q{i}-{v}.wav")
            x, _ = sf.read(path, dtype="float32")
            pad = np.zeros(4000, np.float32)  # the endpointer's pre-roll and tail, about
            out.append((f"{v}: q{i}", q, np.concatenate([pad, x, pad])))
    for label in json.loads((ROOT / "assets" / "turns" / "labels.json").read_text()):
        if label["lang"] == "en":
            x, _ = sf.read(ROOT / "assets" / "turns" / label["file"], dtype="float32")
            x = x[:int((label["speech_end_s"] + 0.25) * 16000)]  # as the endpointer cuts
            out.append((label["file"], label["text"], np.concatenate([pad, x])))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", choices=["tiny.en", "base"], default="tiny.en")
    args = p.parse_args()
    path = tiny_en_dir() if args.model == "tiny.en" \
        else str(MODELS / "whisper-base")
    windows = {"30 s window": (30.0, 0.0), "10 s window": (10.0, 0.0),
               "7 s window where it fits": (AsrConfig.window_s, 7.0)}
    asrs = {}
    for name, (window, short) in windows.items():
        asrs[name] = Asr(AsrConfig(model=path, language="en", cpu_threads=2, window_s=window,
                                   short_window_s=short))
        asrs[name].setup()
    rows, edits = [], {k: [0, 0] for k in windows}
    with tempfile.TemporaryDirectory() as tmp:
        for clip, ref, audio in clips(Path(tmp)):
            row = {"clip": clip, "seconds": round(len(audio) / 16000, 2), "reference": ref}
            times: dict[str, list[float]] = {k: [] for k in windows}
            for _ in range(4):
                for name, asr in asrs.items():  # alternate, so drift hits both
                    tr = asr.process(0, audio)
                    row[name] = tr.text
                    times[name].append((tr.asr_end - tr.asr_start) * 1000)
            for name in windows:
                row[f"{name} ms"] = round(statistics.median(times[name][1:]), 1)
                e, n = wer(ref, row[name])
                edits[name][0] += e
                edits[name][1] += n
            rows.append(row)
    date = dt.date.today().isoformat()
    command = "python -m bench.asr " + " ".join(sys.argv[1:])
    med = {k: round(statistics.median(r[f"{k} ms"] for r in rows), 1) for k in windows}
    word_err = {k: round(e / n, 3) for k, (e, n) in edits.items()}
    box = machine()
    lines = [f"Measured {date} on {describe(box)}; model {args.model}, int8, 2 threads, "
             f"beam 1; command: `{command}`.", "",
             "| clip | s | " + " | ".join(f"{k}: ms / text" for k in windows) + " |",
             "|---|---|" + "---|" * len(windows)]
    for r in rows:
        lines.append(f"| {r['clip']} | {r['seconds']} | "
                     + " | ".join(f"{r[f'{k} ms']} / {r[k]}" for k in windows) + " |")
    a, b, c = windows
    lines += ["", f"| | {a} | {b} | {c} |", "|---|---|---|---|",
              f"| median ms per clip | {med[a]} | {med[b]} | {med[c]} |",
              f"| WER over {len(rows)} clips | {word_err[a]} | {word_err[b]} | {word_err[c]} |",
              "", f"Ratio {b} / {a}: {med[b] / med[a]:.2f}; {c} / {b}: {med[c] / med[b]:.2f}"]
    out = ROOT / "docs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "asr_cpu.json").write_text(json.dumps(
        {"command": command, "date": date, "machine": box, "rows": rows, "median_ms": med,
         "wer": word_err},
        indent=1))
    (out / "asr_cpu.md").write_text("\n".join(lines) + "\n")
    print(" | ".join(f"{k}: {med[k]} ms, WER {word_err[k]}" for k in windows))


if __name__ == "__main__":
    main()
