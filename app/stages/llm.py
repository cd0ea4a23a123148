"""Streaming chat completions against an OpenAI-compatible server (vLLM), timed per token."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from app.messages import ReplyDelta


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint. The API key is never shown or exported."""

    name: str
    base_url: str
    model: str
    api_key: str = field(default="EMPTY", repr=False)


@dataclass
class LlmConfig:
    max_tokens: int = 120
    """Reply token cap: spoken replies are short."""
    reply_sentences: int = 2
    """The spoken-reply budget: the reply ends after this many sentences, and the rest is
    never generated (`app.stages.budget`; 0: only `max_tokens` ends it)."""
    reply_seconds: float = 0.0
    """The budget in time: a reply that takes longer to say ends at its next break (0: off;
    a model made for short spoken replies keeps to them)."""
    temperature: float = 0.0
    repetition_penalty: float = 1.0
    """vLLM extra sampling parameter; small models loop under greedy decoding without it."""
    history_turns: int = 8
    """User/assistant pairs kept in the prompt."""
    prefill: bool = True
    """Prefill the persona at start and, once a turn is over, a session's history up to the
    next question (`Agent.warm`), while nothing waits."""
    timeout_s: float = 30.0


THINKING_OFF = {"enable_thinking": False}
"""The chat template's switch every request of the app sends (the card: thinking off)."""


class LlmError(RuntimeError):
    """The endpoint failed; the message is shown to the user."""


@dataclass
class StreamStats:
    """Filled in while a reply streams; read after the iterator ends."""

    sent: float = 0.0
    first: float | None = None
    last: float | None = None
    closed: float | None = None
    deltas: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None

    @property
    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.deltas


def client_for(endpoint: Endpoint, timeout_s: float):  # openai.OpenAI
    """One client per server, kept: making one (its HTTP pool, its TLS context) is not
    free, and a client made per turn pays for it between the request being ready and sent
    (docs/PERFORMANCE.md); a kept one also keeps its
    connection open. httpx's client is safe to share between threads."""
    return _client(endpoint.base_url, endpoint.api_key or "EMPTY", timeout_s)


@functools.lru_cache(maxsize=32)
def _client(base_url: str, api_key: str, timeout_s: float):  # openai.OpenAI
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)


def stream_chat(endpoint: Endpoint, messages: list[dict], cfg: LlmConfig, turn_id: int,
                stats: StreamStats, cancel: threading.Event | None = None,
                client=None) -> Iterator[ReplyDelta]:
    """Yield reply text as it arrives. Greedy, thinking off, usage reported at the end."""
    import httpx
    import openai

    client = client or client_for(endpoint, cfg.timeout_s)
    extra: dict = {"chat_template_kwargs": THINKING_OFF}
    if cfg.repetition_penalty != 1.0:
        extra["repetition_penalty"] = cfg.repetition_penalty
    stats.sent = time.perf_counter()
    try:
        stream = client.chat.completions.create(
            model=endpoint.model, messages=messages, stream=True, max_tokens=cfg.max_tokens,
            temperature=cfg.temperature,
            # usage with every chunk (vLLM's continuous usage): a reply the spoken-reply
            # budget cuts off never reaches the final chunk that carries it
            stream_options={"include_usage": True, "continuous_usage_stats": True},
            extra_body=extra,
        )
        with stream:
            for chunk in stream:
                now = time.perf_counter()
                if chunk.usage is not None:
                    _read_usage(chunk.usage, stats)
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                if choice.finish_reason:
                    stats.finish_reason = choice.finish_reason
                text = choice.delta.content or ""
                if not text:
                    continue
                if stats.first is None:
                    stats.first = now
                stats.last = now
                stats.deltas += 1
                yield ReplyDelta(turn_id, text, now)
                if cancel is not None and cancel.is_set():
                    stats.finish_reason = "cancelled"
                    break
    except openai.APIConnectionError as exc:
        raise LlmError(f"cannot reach the model at {endpoint.base_url} "
                       f"({type(exc.__cause__ or exc).__name__})") from exc
    except openai.APIStatusError as exc:
        raise LlmError(f"the model server answered {exc.status_code}: "
                       f"{_short(exc.message)}") from exc
    except (openai.APIError, httpx.HTTPError) as exc:  # httpx: the server died mid-stream
        raise LlmError(f"the model stream broke ({type(exc).__name__}): "
                       f"{_short(str(exc))}") from exc
    finally:
        stats.closed = time.perf_counter()


def prefill(endpoint: Endpoint, messages: list[dict], cfg: LlmConfig) -> int | None:
    """Have the server compute `messages` as the start of a later prompt (its prefix cache
    keeps the whole blocks), generating one token; returns the prompt's cached tokens.
    The chat template renders them without the assistant's opening (`add_generation_prompt`
    off), so the text is a true prefix of the next turn's prompt."""
    import openai

    try:
        done = client_for(endpoint, cfg.timeout_s).chat.completions.create(
            model=endpoint.model, messages=messages, max_tokens=1, temperature=0,
            extra_body={"chat_template_kwargs": THINKING_OFF, "add_generation_prompt": False})
    except openai.APIError as exc:
        raise LlmError(f"prefill on {endpoint.base_url} failed: {_short(str(exc))}") from exc
    details = done.usage.prompt_tokens_details if done.usage else None
    return details.cached_tokens if details is not None else None


class ChatStream(Protocol):
    """The LLM stage of a turn: a streamed, timed chat completion (a test may script one)."""

    def stream(self, endpoint: Endpoint, messages: list[dict], cfg: LlmConfig, turn_id: int,
               stats: StreamStats, cancel: threading.Event | None = None
               ) -> Iterator[ReplyDelta]: ...


class OpenAIChat:
    """The real stage: `stream_chat` through the openai client."""

    def stream(self, endpoint: Endpoint, messages: list[dict], cfg: LlmConfig, turn_id: int,
               stats: StreamStats, cancel: threading.Event | None = None
               ) -> Iterator[ReplyDelta]:
        return stream_chat(endpoint, messages, cfg, turn_id, stats, cancel)


def _read_usage(usage, stats: StreamStats) -> None:  # openai CompletionUsage
    stats.completion_tokens = usage.completion_tokens
    stats.prompt_tokens = usage.prompt_tokens
    details = getattr(usage, "prompt_tokens_details", None)
    if details is not None and getattr(details, "cached_tokens", None) is not None:
        stats.cached_tokens = details.cached_tokens


def _short(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[:n] + "..."


def check_endpoint(endpoint: Endpoint, timeout_s: float = 5.0) -> list[str]:
    """Models the endpoint serves; raise LlmError with advice when it cannot be reached."""
    import openai

    try:
        models = client_for(endpoint, timeout_s).models.list()
    except openai.APIError as exc:
        raise LlmError(f"cannot reach {endpoint.base_url}: {type(exc).__name__}") from exc
    return [m.id for m in models.data]


DRY_RUN_MARKER = "DRY_RUN.json"  # written by `python -m build dry-run` into a weightless dir


def dry_run_info(endpoint: Endpoint, timeout_s: float = 5.0) -> dict | None:
    """The dry-run marker of the directory the server loaded (dummy weights: replies are
    random text), when that directory is on this machine; else None."""
    import json
    from pathlib import Path

    try:
        models = server_json(endpoint, "/v1/models", timeout_s=timeout_s).get("data", [])
        for m in models:
            if m.get("id") == endpoint.model and m.get("root"):
                marker = Path(m["root"]) / DRY_RUN_MARKER
                return json.loads(marker.read_text()) if marker.exists() else None
    except (OSError, ValueError):
        return None
    return None


TOKENIZER_PROBE = "Hello, 你好! Voice agents need turns back in 300 ms; 小安：好的。"


def server_root(endpoint: Endpoint) -> str:
    """The server's address without the OpenAI `/v1` prefix (vLLM's /tokenize lives there)."""
    return endpoint.base_url.rstrip("/").removesuffix("/v1")


class ServerError(OSError):
    """A route of the model server failed: unreachable, or an HTTP error status."""


def _request(url: str, body: dict | None, api_key: str, timeout_s: float):
    """GET (or, with `body`, POST as JSON) with httpx, the HTTP client the openai client
    uses too; every failure becomes a ServerError."""
    import httpx

    try:
        resp = httpx.request("POST" if body is not None else "GET", url, json=body,
                             timeout=timeout_s,
                             headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"})
        resp.raise_for_status()
        return resp
    except httpx.HTTPError as exc:
        raise ServerError(f"{url}: {type(exc).__name__}: {exc}") from exc


def server_json(endpoint: Endpoint, route: str, body: dict | None = None,
                timeout_s: float = 10.0) -> dict:
    """GET (or, with `body`, POST as JSON) a route of the endpoint's server with its key."""
    return _request(server_root(endpoint) + route, body, endpoint.api_key, timeout_s).json()


def metrics_text(base_url: str, timeout_s: float = 2.0) -> str | None:
    """The server's Prometheus page; None when it has none (not vLLM) or cannot be reached."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        return _request(root + "/metrics", None, "", timeout_s).text
    except ServerError:
        return None


def post_json(endpoint: Endpoint, route: str, body: dict, timeout_s: float = 10.0) -> dict:
    """POST JSON to a route of the endpoint's server ("/tokenize", "/v1/chat/completions")."""
    return server_json(endpoint, route, body, timeout_s)


def tokenize(endpoint: Endpoint, text: str, timeout_s: float = 5.0) -> list[int] | None:
    """Token ids from vLLM's /tokenize; None when the server has no such route."""
    try:
        body = post_json(endpoint, "/tokenize", {"model": endpoint.model, "prompt": text},
                         timeout_s)
        return list(body["tokens"])
    except (OSError, ValueError, KeyError):  # URLError is an OSError
        return None


def compare_tokenizers(a: Endpoint, b: Endpoint) -> str:
    """"same", "different" or "unknown": per-token figures compare only when the same."""
    ids_a, ids_b = tokenize(a, TOKENIZER_PROBE), tokenize(b, TOKENIZER_PROBE)
    if ids_a is None or ids_b is None:
        return "unknown"
    return "same" if ids_a == ids_b else "different"
