"""Whisper tiny.en on the CPU: CTranslate2's GEMM backend and its thread count, in one run.

  .venv/bin/python -m bench.asr_backends [--rounds 3]

CTranslate2 computes with Intel MKL on an Intel CPU and with oneDNN on any other vendor's
(AMD); `CT2_USE_MKL=0` gives an Intel CPU the other vendors' backend, and the three ISA
caps its AVX2 paths, so one Intel box measures both of what an AMD AVX2 box and an Intel
one run. Each setting is a fresh process (the backend is chosen once per process) running
the app's own `app.stages.asr.Asr` as the demo configures it (tiny.en, int8, the 6 s window where a
clip fits), on the committed English recordings, each decoded 4 times (the first dropped);
settings alternate within each round, so drift hits all. The backend each process took is
read back from CTranslate2's own log.
Writes docs/bench/asr_backends.json and .md; prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys

from app.metrics import percentile
from app.ops.machine import AVX2_CAPS as AVX2
from app.ops.machine import CAPS, ct2_choice, describe, machine
from app.paths import ROOT

SETTINGS = {
    "native, 2 threads": ({}, 2), "native, 1 thread": ({}, 1),
    "AVX2 forced, 2 threads": (AVX2, 2), "AVX2 forced, 1 thread": (AVX2, 1),
    "AVX2 forced + CT2_USE_MKL=0, 2 threads": ({**AVX2, "CT2_USE_MKL": "0"}, 2),
    "AVX2 forced + CT2_USE_MKL=0, 1 thread": ({**AVX2, "CT2_USE_MKL": "0"}, 1),
}
CHILD = """
import json, sys
import soundfile as sf
from app.stages.asr import Asr
from app.paths import ROOT
from app.stages.asr_config import CPU_SHORT_WINDOW_S, AsrConfig
from app.ops.prepare import tiny_en_dir
asr = Asr(AsrConfig(model=tiny_en_dir(), language="en", cpu_threads=int(sys.argv[1]),
                    short_window_s=CPU_SHORT_WINDOW_S))
asr.setup()
truth = json.loads((ROOT / "assets" / "transcripts.json").read_text())
out = {}
for name in sorted(c for c in truth if c.startswith("en_") and "48k" not in c):
    audio, _ = sf.read(ROOT / "assets" / name, dtype="float32")
    times = []
    for _ in range(4):
        tr = asr.process(0, audio)
        times.append((tr.asr_end - tr.asr_start) * 1000)
    out[name] = {"ms": times[1:], "text": tr.text}
print("RESULT " + json.dumps(out))
"""


def run_one(env: dict[str, str], threads: int) -> tuple[dict, str]:
    full = {**{k: v for k, v in os.environ.items() if k not in CAPS},
            **env, "CT2_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads)], env=full, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the ASR process failed:\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):]), " / ".join(ct2_choice(out.stderr))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    args = p.parse_args()
    times: dict[str, list[float]] = {k: [] for k in SETTINGS}
    backend: dict[str, str] = {}
    texts: dict[str, dict[str, str]] = {}
    for _ in range(args.rounds):
        for name, (env, threads) in SETTINGS.items():
            clips, backend[name] = run_one(env, threads)
            times[name] += [t for c in clips.values() for t in c["ms"]]
            texts[name] = {c: v["text"] for c, v in clips.items()}
    med = {k: round(statistics.median(v), 1) for k, v in times.items()}
    date = dt.date.today().isoformat()
    command = "python -m bench.asr_backends " + " ".join(sys.argv[1:])
    box = machine()
    lines = [f"Measured {date} on {describe(box)}; Whisper tiny.en int8 through "
             f"`app.stages.asr.Asr` (the demo's 6 s window), the committed English "
             f"recordings, {args.rounds} rounds; command: `{command}`.", "",
             "| setting | CTranslate2 ISA / int8 GEMM | ms per clip, median | p90 | "
             "against native, 2 threads |", "|---|---|---|---|---|"]
    base = med["native, 2 threads"]
    for k in SETTINGS:
        p90 = percentile(times[k], 90)
        lines.append(f"| {k} | {backend[k]} | {med[k]} | {p90:.1f} | {med[k] / base:.2f} |")
    pairs = [(f"{k[:-len(', 2 threads')]}", med[k.replace("2 threads", "1 thread")] / med[k])
             for k in SETTINGS if k.endswith("2 threads")]
    lines += ["", "One thread against two: " + "; ".join(f"{n} {r:.2f}" for n, r in pairs)]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "asr_backends.json"), "w") as f:
        json.dump({"command": command, "date": date, "machine": box, "median_ms": med,
                   "backend": backend, "times_ms": times, "texts": texts}, f, indent=1)
    with open(os.path.join(args.out, "asr_backends.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(" | ".join(f"{k}: {med[k]} ms" for k in SETTINGS))


if __name__ == "__main__":
    main()
