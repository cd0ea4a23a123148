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

from app.stages.llm import Endpoint, metrics_text, post_json, server_root, tokenize

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


def cache_config(endpoint: Endpoint, timeout_s: float = 3.0) -> dict[str, str] | None:
    """The labels of the server's vllm:cache_config_info (its cache settings as strings);
    None if it publishes none."""
    from prometheus_client.parser import text_string_to_metric_families

    text = metrics_text(endpoint.base_url, timeout_s)
    if text is None:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return dict(sample.labels)
    return None


def server_block_size(endpoint: Endpoint, timeout_s: float = 3.0) -> int | None:
    """The prefix-cache granularity the server reports in vllm:cache_config_info."""
    return _reported_block(cache_config(endpoint, timeout_s) or {})


def _reported_block(labels: dict[str, str]) -> int | None:
    for key in ("cache_hit_alignment_tokens", "prefix_match_unit", "mamba_block_size",
                "block_size"):
        value = labels.get(key, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


PROBE_SENTENCE = "The quiet river runs past the old mill and on towards the sea. "


def measured_block_size(endpoint: Endpoint, first: int = 1400, max_probes: int = 5,
                        timeout_s: float = 120.0) -> int | None:
    """The prefix-cache granularity the server applies, measured from `cached_tokens`.

    Hybrid models cache whole blocks whose size vLLM settles inside the engine (the
    attention block grows until a page holds the recurrent state: 544 tokens on Qwen3.6
    with a bf16 SSM state) after `vllm:cache_config_info` was published, which then still
    says 16. So: send a fresh prompt twice; the second time the server reports
    `cached = floor((prompt - 1) / B) * B`. Every multiple of 16 that fits stays a
    candidate; further probes, each aimed just past the smallest candidate's next
    boundary, rule out the rest. None when the server reports no cached tokens (prefix
    caching off, or `--enable-prompt-tokens-details` missing) or nothing fits.
    """
    import uuid

    ids = tokenize(endpoint, PROBE_SENTENCE * 8)
    per_sentence = len(ids) / 8 if ids else 13.0

    def probe(tokens: int) -> tuple[int, int] | None:
        text = f"[{uuid.uuid4()}]\n" + PROBE_SENTENCE * max(1, round(tokens / per_sentence))
        body = {"model": endpoint.model, "max_tokens": 1, "temperature": 0.0,
                "messages": [{"role": "system", "content": text},
                             {"role": "user", "content": "ok"}]}
        try:
            for _ in range(2):  # the first fills the cache, the second reads it
                usage = post_json(endpoint, "/v1/chat/completions", body, timeout_s)["usage"]
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            return (int(usage["prompt_tokens"]), int(cached)) if cached else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    seen = probe(first)
    if seen is None:
        return None
    overhead = seen[0] - first  # nonce, template and rounding: prompt minus what was asked
    candidates = [b for b in range(16, seen[0] + 1, 16) if (seen[0] - 1) // b * b == seen[1]]
    for _ in range(max_probes - 1):
        if len(candidates) <= 1:
            break
        b = candidates[0]  # aim half a block past the smallest candidate's next boundary
        result = probe(seen[1] + b + b // 2 - overhead)
        if result is None:
            return None
        candidates = [c for c in candidates if (result[0] - 1) // c * c == result[1]]
        seen = result
    return candidates[0] if len(candidates) == 1 else None


def block_size(endpoint: Endpoint, given: int = 0) -> tuple[int | None, str]:
    """The prefix-cache block to pad to, and where it came from: `given` (a flag), else
    measured on the server, else its `vllm:cache_config_info`; (None, ...) if none says."""
    if given:
        return given, "flag"
    labels = cache_config(endpoint) or {}  # read once: the probes do not change it
    if labels.get("enable_prefix_caching") != "False":  # off: the probes would read nothing
        measured = measured_block_size(endpoint)
        if measured:
            return measured, "measured on the server"
    return _reported_block(labels), "server metrics"


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
