import threading

from app.stages.llm import Endpoint
from app.stages.servermetrics import ServerViews, between, parse

BEFORE = """# HELP vllm:time_to_first_token_seconds x
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 2.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 9.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
"""
AFTER = BEFORE.replace("1.5\n", "1.62\n").replace("_count{engine=\"0\",model_name=\"m\"} 10.0",
                                                  "_count{engine=\"0\",model_name=\"m\"} 11.0") \
    .replace("2.0\n", "2.5\n").replace("} 100.0", "} 120.0").replace("} 256.0", "} 384.0") \
    .replace("} 1000.0", "} 1200.0").replace("} 9.0", "} 10.0")


def test_parse_sums_over_labels():
    values = parse(BEFORE)
    assert values["vllm:request_success_total"] == 10.0
    assert values["vllm:time_to_first_token_seconds_count"] == 10.0


def test_one_request_between_snapshots():
    view = between(parse(BEFORE), parse(AFTER))
    assert view.requests == 1
    assert view.ttft_ms == 120.0
    assert view.itl_ms == 25.0  # 0.5 s over 20 tokens
    assert view.prefix_hit_tokens == 128 and view.prefix_query_tokens == 200
    assert between(None, parse(AFTER)) is None


def test_a_trailing_timestamp_is_not_the_value():
    """The exposition format allows `name{labels} value timestamp`; the value is the value."""
    text = BEFORE.replace("} 9.0\n", "} 9.0 1764547200000\n")
    assert parse(text)["vllm:request_success_total"] == 10.0


def test_a_request_waits_for_its_conversations_prefill_only():
    """A prefill (`aside`) announced for conversation "a": a's next request starts after it,
    b's does not wait (no server listens: the snapshots are None)."""
    views = ServerViews(settle_s=0, aside_wait_s=60)
    endpoint = Endpoint("x", "http://127.0.0.1:9/v1", "m")
    over = views.aside(endpoint, "a")
    started = {}
    a = threading.Thread(target=lambda: started.setdefault("a", views.before(endpoint, "a")))
    a.start()
    assert views.before(endpoint, "b") is None  # another conversation's request: at once
    a.join(timeout=0.5)
    assert a.is_alive() and "a" not in started  # held while the prefill runs
    over(False)
    a.join(timeout=10)
    assert not a.is_alive() and started == {"a": None}
