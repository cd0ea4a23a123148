"""Pad the persona system prompt to a whole number of prefix-cache blocks.

vLLM caches a prompt prefix in whole blocks, and hybrid Gated-DeltaNet models only at block
boundaries (the recurrent state is saved per block): 1056 tokens with the fp32 SSM state,
544 with `--mamba-ssm-cache-dtype bfloat16` on Qwen3.6-35B-A3B (the model card). A persona
that ends mid-block leaves its tail to be prefilled again on every turn. Padded with neutral
filler to the next block boundary, every persona token lands in a cached block.

Counting uses the server's own tokenizer and chat template (vLLM's /tokenize with the
system message alone), so what is counted is what the server caches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.config import Endpoint
from app.llm import post_json, server_root
from app.servermetrics import metrics_text

# Documented defaults when the server does not say (the model card's measurements).
CARD_BLOCKS = {"bf16-ssm": 544, "fp32-ssm": 1056}
FILLER_HEAD = "\n\n"
# Units appended one at a time; each is one token in common BPE vocabularies, and an
# alternative is tried when a merge makes a unit overshoot the target count.
FILLER_UNITS = [" .", " -", " ~", " *", "."]


class PaddingError(RuntimeError):
    pass


@dataclass(frozen=True)
class Padded:
    text: str
    tokens: int
    """Tokens of the rendered system message after padding (a multiple of `block`)."""
    original_tokens: int
    block: int


def pad_to_block(persona: str, count: Callable[[str], int], block: int,
                 max_blocks: int = 64) -> Padded:
    """Append filler after the persona until the rendered system message is a multiple of
    `block` tokens. `count(text)` returns the tokens of that system message."""
    if block <= 0:
        raise ValueError("block must be positive")
    original = count(persona)
    if original % block == 0:
        return Padded(persona, original, original, block)
    target = -(-original // block) * block
    while target <= original + block * max_blocks:
        text = _fill(persona + FILLER_HEAD, count, target)
        if text is not None:
            return Padded(text, target, original, block)
        target += block  # a merge jumped past this boundary: aim for the next one
    raise PaddingError(f"could not pad {original} tokens to a multiple of {block}")


def _fill(base: str, count: Callable[[str], int], target: int) -> str | None:
    text, n = base, count(base)
    if n > target:
        return None
    # bulk first (one unit ~ one token), then unit by unit
    while n < target:
        for unit in FILLER_UNITS:
            missing = target - n
            trial = text + unit * max(1, missing - 2 if missing > 4 else 1)
            m = count(trial)
            if m <= target and m > n:
                text, n = trial, m
                break
        else:
            return None
    return text


def server_block_size(endpoint: Endpoint, timeout_s: float = 3.0) -> int | None:
    """The prefix-cache granularity the server reports in vllm:cache_config_info."""
    text = metrics_text(endpoint.base_url, timeout_s)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(part.split("=", 1) for part in
                          _split_labels(line[line.index("{") + 1:line.rindex("}")]))
            for key in ("cache_hit_alignment_tokens", "prefix_match_unit",
                        "mamba_block_size", "block_size"):
                value = labels.get(key, "").strip('"')
                if value.isdigit() and int(value) > 0:
                    return int(value)
    return None


def _split_labels(body: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return [p for p in parts if "=" in p]


def system_token_counter(endpoint: Endpoint, timeout_s: float = 10.0) -> Callable[[str], int]:
    """count(text): tokens of [{"role": "system", "content": text}] rendered by the server's
    chat template, without a generation prompt."""

    def count(text: str) -> int:
        body = {"model": endpoint.model, "add_generation_prompt": False,
                "messages": [{"role": "system", "content": text}]}
        try:
            return int(post_json(endpoint, "/tokenize", body, timeout_s)["count"])
        except (OSError, ValueError, KeyError) as exc:
            raise PaddingError(f"cannot count tokens at {server_root(endpoint)}/tokenize: "
                               f"{exc}") from exc

    return count
