import pytest

from app.config import Endpoint, LlmConfig
from app.launch import free_port
from app.llm import LlmError, StreamStats, check_endpoint, stream_chat

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
