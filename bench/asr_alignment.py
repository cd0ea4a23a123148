"""The ASR's last-word alignment on each device: CUDA float16 against the CPU's int8.

  python -m bench.asr_alignment --model DIR [--devices cuda,cpu] [--out DIR]

The end of a turn leaves out a last word Whisper aligned to no voice
(`app.stages.endofturn.heard_words`); the alignment is faster-whisper's, run by `app.stages.asr.Asr`
on whichever device the ASR uses. This runs the app's `Asr` on the labelled set's English clips
(`assets/turns/`), each paused sentence cut at its pause (as the speculative start hears it)
and whole, on every device given, and writes per clip the transcript, the last word's span,
the word left out and the words' verdict, with the decode time; the devices are compared
clip by clip (same transcript; the last word's end). The clips are read with the standard
library's `wave` (a GPU host may lack soundfile's C library).

Writes asr_alignment.json and .md to --out (default docs/bench/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
import wave
from pathlib import Path

import numpy as np

from app.ops.machine import describe, machine
from app.paths import ROOT
from app.stages.asr import Asr
from app.stages.asr_config import ASR_COMPUTE, AsrConfig
from app.stages.endofturn import closed, heard_words, unfinished_ending

SET = ROOT / "assets" / "turns"
TAIL_S = 0.13  # the silence a speculative start has heard after the last word


def clips() -> list[tuple[str, np.ndarray]]:
    """The English clips: each paused sentence up to its pause, then whole."""
    out = []
    for lb in json.loads((SET / "labels.json").read_text()):
        if lb["lang"] != "en":
            continue
        with wave.open(str(SET / lb["file"])) as w:
            x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
        x /= 32768
        if lb["kind"] == "pause":
            out.append((f"{lb['file']} (to the pause)",
                        x[:int((lb["pause_at_s"] + TAIL_S) * 16000)]))
        out.append((lb["file"], x[:int((lb["speech_end_s"] + TAIL_S) * 16000)]))
    return out


def run(model: str, device: str, audio: list[tuple[str, np.ndarray]]) -> dict:
    asr = Asr(AsrConfig(model=model, device=device, compute_type=ASR_COMPUTE[device],
                        language="en"))
    asr.setup()
    rows = []
    for name, x in audio:
        t0 = time.perf_counter()
        tr = asr.process(0, x)
        ms = (time.perf_counter() - t0) * 1000
        said, guessed = heard_words(tr.text, tr.last_word_s)
        rows.append({"clip": name, "text": tr.text, "last_word_s": tr.last_word_s,
                     "left_out": guessed, "ends_open": unfinished_ending(said),
                     "closed": closed(said), "ms": round(ms, 1)})
    return {"warmup_ms": asr.warmup_ms, "ms_p50": float(np.median([r["ms"] for r in rows])),
            "rows": rows}


def markdown(meta: dict, runs: dict[str, dict]) -> str:
    devices = list(runs)
    lines = [f"Measured {meta['date']} on {meta['machine_line']}; command: "
             f"`{meta['command']}`. Decode p50 (ms, alignment included): "
             + ", ".join(f"{d} {runs[d]['ms_p50']:.1f}" for d in devices) + ".", "",
             "| clip | " + " | ".join(f"{d}: transcript, last word (s), left out"
                                      for d in devices) + " |",
             "|---|" + "---|" * len(devices)]
    for i, first in enumerate(runs[devices[0]]["rows"]):
        cells = []
        for d in devices:
            r = runs[d]["rows"][i]
            span = "-" if r["last_word_s"] is None else "{:.2f}-{:.2f}".format(*r["last_word_s"])
            cells.append(f"{r['text']} · {span} · {r['left_out'] or '-'}")
        lines.append(f"| {first['clip']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the CTranslate2 Whisper directory")
    p.add_argument("--devices", default="cuda,cpu")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    args = p.parse_args()
    audio = clips()
    runs = {d: run(args.model, d, audio) for d in args.devices.split(",")}
    m = machine()
    meta = {"date": dt.date.today().isoformat(), "machine": m, "machine_line": describe(m),
            "command": "python -m bench.asr_alignment --devices " + args.devices}
    if len(runs) == 2:
        pairs = list(zip(*(runs[d]["rows"] for d in runs), strict=True))
        meta["same_transcript"] = sum(x["text"] == y["text"] for x, y in pairs)
        meta["same_left_out"] = sum(x["left_out"] == y["left_out"] for x, y in pairs)
        meta["last_word_end_diff_s"] = [
            round(x["last_word_s"][1] - y["last_word_s"][1], 3) for x, y in pairs
            if x["last_word_s"] and y["last_word_s"]]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "asr_alignment.json").write_text(json.dumps({"meta": meta, "runs": runs},
                                                            indent=1, ensure_ascii=False))
    (args.out / "asr_alignment.md").write_text(markdown(meta, runs))
    print(" | ".join(f"{d}: decode p50 {r['ms_p50']:.1f} ms" for d, r in runs.items()),
          {k: v for k, v in meta.items() if k.startswith("same")})


if __name__ == "__main__":
    main()
