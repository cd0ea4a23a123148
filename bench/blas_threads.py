"""What NumPy's BLAS threads cost the app: a process computing a clip's Whisper features
(the mel product is the app's one sizeable matrix product) ten times a second, with the
library's default threads and with the app's setting (`app.ops.machine.one_blas_thread`), each
in a fresh process; how many cores the process keeps busy and how long a call takes.

  .venv/bin/python -m bench.blas_threads --out docs/bench/blas_threads
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from app.metrics import percentile
from app.ops.launch import ROOT
from app.ops.machine import describe, machine

SECONDS = 8.0  # per setting
EVERY_S = 0.1  # ten clips a second: 32 conversations' speculative and final ASR
CLIP_S = 3

PROBE = """
import json, sys, time
import numpy as np
from faster_whisper.feature_extractor import FeatureExtractor
if sys.argv[1] == "app":
    from app.ops.machine import one_blas_thread
    one_blas_thread()
from threadpoolctl import threadpool_info
threads = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
fe = FeatureExtractor()
audio = np.random.default_rng(0).normal(0, 0.1, 16000 * {clip}).astype(np.float32)
fe(audio, padding=400)  # warm-up
calls, t0, c0 = [], time.perf_counter(), time.process_time()
while time.perf_counter() - t0 < {seconds}:
    a = time.perf_counter()
    fe(audio, padding=400)
    calls.append((time.perf_counter() - a) * 1000)
    time.sleep({every})
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({{"blas_threads": threads, "calls_ms": calls,
                   "cores_busy": round(cpu / wall, 2)}}))
"""


def run(setting: str) -> dict:
    code = PROBE.format(clip=CLIP_S, seconds=SECONDS, every=EVERY_S)
    out = subprocess.run([sys.executable, "-c", code, setting], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    calls = probe.pop("calls_ms")
    return {"setting": setting, **probe, "calls": len(calls),
            "call_ms_p50": round(percentile(calls, 50), 2),
            "call_ms_p90": round(percentile(calls, 90), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "blas_threads")
    args = ap.parse_args()
    m = machine()
    rows = [run("library-default"), run("app")]
    command = "python -m bench.blas_threads " + " ".join(sys.argv[1:])
    lines = [f"Measured {dt.date.today()} on {describe(m)}; command: `{command}`. A "
             f"{CLIP_S} s clip's features every {EVERY_S * 1000:.0f} ms for {SECONDS:.0f} s.",
             "", "| setting | BLAS threads | cores busy | call p50 ms | call p90 ms |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['blas_threads']} | {r['cores_busy']} | "
              f"{r['call_ms_p50']} | {r['call_ms_p90']} |" for r in rows]
    table = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"date": str(dt.date.today()), "command": command, "machine": m, "rows": rows},
        indent=1))
    args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
