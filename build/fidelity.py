"""Fidelity of a candidate endpoint to a reference one, the model card's way.

1. `reference`: greedy answers of the reference endpoint (e.g. the BF16 base) to the
   protocol's prompts (persona + history + each user turn), saved as JSONL.
2. `score`: for a candidate endpoint, the per-token negative log-likelihood it assigns to
   each reference answer (vLLM prompt logprobs: the answer is fed as the assistant's
   message and scored, not generated), its own greedy answers compared with the reference
   (exact, first sentence), long-form distinct-2, and format probes.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.stages.llm import Endpoint, LlmConfig, StreamStats, post_json, stream_chat
from build.latency import PERSONA, TURNS_FILE

LONG_FORM = "请讲一个三百字左右的小故事，关于一只想学游泳的猫。"
MARKDOWN = re.compile(r"(\*\*|__|^#+ |^\s*[-*] |```|\|.*\|)", re.M)
SENTENCE_END = re.compile(r"[。！？!?]|\.(\s|$)")


@dataclass
class Prompt:
    id: int
    messages: list[dict]


def prompts(persona_path: Path = PERSONA, limit: int = 18) -> list[Prompt]:
    script = json.loads(TURNS_FILE.read_text(encoding="utf-8"))
    persona = persona_path.read_text(encoding="utf-8").strip()
    return [Prompt(i, [{"role": "system", "content": persona}, *script["history"],
                       {"role": "user", "content": turn}])
            for i, turn in enumerate(script["turns"][:limit])]


def greedy(endpoint: Endpoint, messages: list[dict], max_tokens: int) -> str:
    stats = StreamStats()
    cfg = LlmConfig(max_tokens=max_tokens, temperature=0.0, timeout_s=300)
    return "".join(d.text for d in stream_chat(endpoint, messages, cfg, 0, stats)).strip()


def reference(endpoint: Endpoint, out: Path, limit: int = 18, max_tokens: int = 128,
              persona_path: Path = PERSONA) -> Path:
    """Greedy answers of `endpoint`, one JSON object a line."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for p in prompts(persona_path, limit=limit):
            answer = greedy(endpoint, p.messages, max_tokens)
            f.write(json.dumps({"id": p.id, "messages": p.messages, "answer": answer,
                                "model": endpoint.model}, ensure_ascii=False) + "\n")
    return out


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def answer_nll(endpoint: Endpoint, messages: list[dict], answer: str) -> float:
    """Mean negative log-likelihood per token of `answer` as the assistant's reply."""
    prefix = post_json(endpoint, "/tokenize", {"model": endpoint.model, "messages": messages,
                                               "add_generation_prompt": True}, 300)["count"]
    full = messages + [{"role": "assistant", "content": answer}]
    resp = post_json(endpoint, "/v1/chat/completions", {
        "model": endpoint.model, "messages": full, "max_tokens": 1, "temperature": 0.0,
        "add_generation_prompt": False, "continue_final_message": True,
        "prompt_logprobs": 0, "chat_template_kwargs": {"enable_thinking": False}}, 300)
    scored = resp.get("prompt_logprobs")
    if not scored:
        raise RuntimeError(f"{endpoint.base_url} returned no prompt_logprobs (not vLLM?)")
    values = [_logprob(entry) for entry in scored[prefix:] if entry]
    if not values:
        raise RuntimeError("the answer has no tokens to score")
    return -sum(values) / len(values)


def _logprob(entry: dict) -> float:
    # one entry per prompt token: {token_id: {"logprob": ..., "rank": ...}}; with
    # prompt_logprobs=0 it holds the prompt's own token only
    first = next(iter(entry.values()))
    return float(first["logprob"])


def first_sentence(text: str) -> str:
    m = SENTENCE_END.search(text)
    return text[:m.end()].strip() if m else text.strip()


def distinct_2(text: str) -> float:
    """Distinct bigrams / bigrams, over characters for Chinese, words otherwise."""
    units = list(text.replace(" ", "")) if re.search(r"[\u4e00-\u9fff]", text) else text.split()
    grams = list(zip(units, units[1:], strict=False))
    return round(len(set(grams)) / len(grams), 3) if grams else 0.0


def probes(answers: list[str], tag: str) -> dict[str, int]:
    """Format probes: the persona tag first, no markdown, spoken length (<= 3 sentences)."""
    return {"tag": sum(a.startswith(tag) for a in answers),
            "no_markdown": sum(not MARKDOWN.search(a) for a in answers),
            "short": sum(len(SENTENCE_END.findall(a)) <= 3 for a in answers),
            "of": len(answers)}


def score(candidate: Endpoint, refs: list[dict], tag: str = "小安：",
          max_tokens: int = 128, long_form_tokens: int = 400, progress: bool = True) -> dict:
    from tqdm import tqdm

    rows = []
    for ref in tqdm(refs, desc=f"fidelity {candidate.name}", disable=not progress):
        nll = answer_nll(candidate, ref["messages"], ref["answer"])
        own = greedy(candidate, ref["messages"], max_tokens)
        rows.append({"id": ref["id"], "nll": round(nll, 4), "answer": own,
                     "exact": own == ref["answer"],
                     "first_sentence": first_sentence(own) == first_sentence(ref["answer"])})
    long_form = greedy(candidate, [{"role": "system", "content": refs[0]["messages"][0]
                                    ["content"]}, {"role": "user", "content": LONG_FORM}],
                       long_form_tokens)
    nlls = [r["nll"] for r in rows]
    return {"endpoint": candidate.name, "model": candidate.model, "n": len(rows),
            "nll_mean": round(statistics.mean(nlls), 3),
            "nll_median": round(statistics.median(nlls), 3),
            "exact": sum(r["exact"] for r in rows),
            "first_sentence": sum(r["first_sentence"] for r in rows),
            "distinct_2": distinct_2(long_form),
            "probes": probes([r["answer"] for r in rows], tag), "rows": rows,
            "long_form": long_form}


def markdown(results: list[dict], command: str, date: str) -> str:
    lines = [f"Measured {date}; command: `{command}`.", "",
             "| endpoint | model | NLL mean / median ↓ | exact / first-sent | long-form "
             "distinct-2 | format probes (tag, no markdown, short) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        p = r["probes"]
        lines.append(f"| {r['endpoint']} | {r['model']} | {r['nll_mean']} / {r['nll_median']}"
                     f" | {r['exact']} / {r['first_sentence']} (of {r['n']}) | {r['distinct_2']}"
                     f" | {p['tag']}, {p['no_markdown']}, {p['short']} of {p['of']} |")
    return "\n".join(lines) + "\n"


def shuffled(refs: list[dict], seed: int = 0) -> Iterator[dict]:
    """The same answers with their words (characters for Chinese) shuffled: a control that
    must score a worse NLL than the real answers."""
    import random

    rng = random.Random(seed)
    for ref in refs:
        text = ref["answer"]
        units = list(text) if re.search(r"[\u4e00-\u9fff]", text) else text.split()
        rng.shuffle(units)
        joiner = "" if re.search(r"[\u4e00-\u9fff]", text) else " "
        yield {**ref, "answer": joiner.join(units)}
