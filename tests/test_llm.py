import threading

import pytest

from app.ops.launch import free_port
from app.stages.llm import (
    Endpoint,
    LlmConfig,
    LlmError,
    StreamStats,
    check_endpoint,
    client_for,
    stream_chat,
)

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "Name a color."}]


def test_streams_tokens_with_timing_and_usage(endpoint):
    stats = StreamStats()
    deltas = list(stream_chat(endpoint, MESSAGES, LlmConfig(max_tokens=24), 1, stats))
    assert len(deltas) >= 2  # token by token, not one blob
    assert stats.sent < stats.first <= stats.last <= stats.closed
    assert stats.completion_tokens == len(deltas) or stats.completion_tokens >= len(deltas) - 1
    assert stats.prompt_tokens > 10
    assert "".join(d.text for d in deltas).strip()


def test_greedy_is_repeatable(endpoint):
    texts = []
    for _ in range(2):
        stats = StreamStats()
        texts.append("".join(d.text for d in stream_chat(endpoint, MESSAGES,
                                                         LlmConfig(max_tokens=16), 1, stats)))
    assert texts[0] == texts[1]


def test_cancel_stops_the_stream(endpoint):
    import threading

    cancel = threading.Event()
    stats = StreamStats()
    got = []
    for delta in stream_chat(endpoint, MESSAGES, LlmConfig(max_tokens=100), 1, stats, cancel):
        got.append(delta)
        cancel.set()
    assert len(got) == 1 and stats.finish_reason == "cancelled"


def test_unreachable_endpoint_is_a_clear_error():
    dead = Endpoint("primary", f"http://127.0.0.1:{free_port()}/v1", "x")
    with pytest.raises(LlmError, match="cannot reach the model"):
        list(stream_chat(dead, MESSAGES, LlmConfig(timeout_s=3), 1, StreamStats()))
    with pytest.raises(LlmError, match="cannot reach"):
        check_endpoint(dead)


def test_wrong_model_name_is_reported(endpoint):
    wrong = Endpoint("primary", endpoint.base_url, "no-such-model")
    with pytest.raises(LlmError, match="404"):
        list(stream_chat(wrong, MESSAGES, LlmConfig(), 1, StreamStats()))
    assert endpoint.model in check_endpoint(endpoint)


def test_one_client_per_server_shared_by_threads(endpoint):
    """Turns reuse their server's client (making one cost 53-97 ms a turn on the 2-core box),
    and three streams through it at once, from three threads, each get a whole reply."""
    assert client_for(endpoint, 30.0) is client_for(endpoint, 30.0)
    other = Endpoint("other", "http://127.0.0.1:1/v1", endpoint.model)
    assert client_for(other, 30.0) is not client_for(endpoint, 30.0)
    replies: list[str] = []

    def ask() -> None:
        stats = StreamStats()
        replies.append("".join(d.text for d in stream_chat(endpoint, MESSAGES,
                                                           LlmConfig(max_tokens=8), 1, stats)))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(replies) == 3 and all(r.strip() for r in replies), replies
