"""Where a decode step goes: GPU kernels per step from a vLLM torch-profiler trace.

    python -m bench.trace_summary TRACE.json.gz --steps N [--wall-ms-per-step X]

`profile_turns` drives a running server (started with `--profiler-config`, see
bench/h200.py): /start_profile, a few spoken turns, /stop_profile, then summarises the
worker's trace: kernels per step, GPU-busy time per step against the wall time per step
the client saw, and the kernels that take the time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from collections import defaultdict
from pathlib import Path


def _short(name: str, width: int = 70) -> str:
    name = re.sub(r"<.*>", "<...>", name)
    name = re.sub(r"\(.*\)", "(...)", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def summarise(trace: Path, steps: int, wall_ms_per_step: float | None = None,
              top: int = 15) -> str:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        return f"{trace.name}: no GPU kernels in the trace"
    by = defaultdict(lambda: [0, 0.0])
    for e in kernels:
        entry = by[_short(e["name"])]
        entry[0] += 1
        entry[1] += e["dur"]
    busy_us = sum(e["dur"] for e in kernels)
    first = min(e["ts"] for e in kernels)
    last = max(e["ts"] + e["dur"] for e in kernels)
    lines = [f"Trace `{trace.name}`: {len(kernels)} kernels over {steps} engine steps "
             f"({len(kernels) / steps:.0f} per step); GPU busy {busy_us / 1e3 / steps:.2f} ms "
             f"per step; first-to-last kernel span {(last - first) / 1e3:.0f} ms.", ""]
    if wall_ms_per_step:
        lines += [f"Client-side ms/token {wall_ms_per_step:.2f}: the GPU is busy "
                  f"{busy_us / 1e3 / steps / wall_ms_per_step:.0%} of a step.", ""]
    lines += ["| kernel | per step | mean µs | ms per step | share |", "|---|---|---|---|---|"]
    for name, (n, dur) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| `{name}` | {n / steps:.1f} | {dur / n:.1f} | {dur / 1e3 / steps:.3f} "
                     f"| {dur / busy_us:.0%} |")
    return "\n".join(lines) + "\n"


def profile_turns(server, trace_dir: Path, out_md: Path, turns: int = 3,
                  max_tokens: int = 33) -> str:
    """Profile `turns` spoken turns on a running server; write and return the summary."""
    import httpx

    from app.stages.llm import server_root
    from build.latency import TURNS_FILE

    root = server_root(server)
    texts = json.loads(TURNS_FILE.read_text(encoding="utf-8"))["turns"][:turns]
    before = set(trace_dir.rglob("*.json.gz")) if trace_dir.exists() else set()
    with httpx.Client(timeout=120) as http:
        http.post(f"{root}/start_profile").raise_for_status()
        t0 = time.perf_counter()
        for text in texts:
            http.post(f"{server.base_url}/chat/completions", json={
                "model": server.served_name, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True, "messages": [{"role": "user", "content": text}],
                "chat_template_kwargs": {"enable_thinking": False}}).raise_for_status()
        wall_ms = (time.perf_counter() - t0) * 1e3
        http.post(f"{root}/stop_profile").raise_for_status()
    deadline = time.time() + 120
    new = []
    while time.time() < deadline:
        new = [p for p in trace_dir.rglob("*.json.gz") if p not in before] \
            if trace_dir.exists() else []
        if new and all(time.time() - p.stat().st_mtime > 5 for p in new):
            break  # written and left alone for 5 s: complete
        time.sleep(2)
    if not new:
        return "profile: no trace written"
    worker = max(new, key=lambda p: p.stat().st_size)  # the GPU worker's trace
    steps = turns * max_tokens  # one prefill step + (max_tokens - 1) decode steps per turn
    text = (f"Profiled {turns} turns x {max_tokens} tokens on `{server.served_name}` "
            f"({wall_ms:.0f} ms wall with the profiler on).\n\n" + summarise(worker, steps))
    out_md.write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--wall-ms-per-step", type=float)
    args = ap.parse_args()
    print(summarise(args.trace, args.steps, args.wall_ms_per_step))


if __name__ == "__main__":
    main()
