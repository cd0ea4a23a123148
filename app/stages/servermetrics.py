"""The server's own view of a request, from vLLM's Prometheus `/metrics`.

A snapshot before and after one request gives that request's server-side TTFT and mean
inter-token latency (histogram sum / count deltas) and its prefix-cache hits. It is exact
when the request was the only one on that server in between (one user, sequential A/B);
with concurrent traffic it is the mean of whatever ran, and `requests` says how many.
A request that is no turn's own (a prefill) runs `aside`: the next window starts after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.stages.llm import metrics_text

WANTED = {
    "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count",
    "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
    "vllm:request_success_total",
}


def parse(text: str) -> dict[str, float]:
    """Sum each wanted series over its labels (engines, finish reasons), read by
    prometheus_client's parser (labels, escapes and optional timestamps as the format says)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in WANTED:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def snapshot(base_url: str, timeout_s: float = 2.0) -> dict[str, float] | None:
    """The wanted series now; None when the server has no /metrics."""
    text = metrics_text(base_url, timeout_s)
    return parse(text) if text is not None else None


@dataclass(frozen=True)
class ServerView:
    requests: int
    """Requests the server finished between the two snapshots (a stream the client closed,
    as the spoken-reply budget does, is aborted: vLLM does not count it)."""
    ttft_ms: float | None
    itl_ms: float | None
    prefix_hit_tokens: int | None
    prefix_query_tokens: int | None


def between(before: dict[str, float] | None, after: dict[str, float] | None) -> ServerView | None:
    if not before or not after:
        return None

    def d(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    def mean_ms(prefix: str) -> float | None:
        n = d(prefix + "_count")
        return round(d(prefix + "_sum") / n * 1000, 1) if n > 0 else None

    hits, queries = d("vllm:prefix_cache_hits_total"), d("vllm:prefix_cache_queries_total")
    return ServerView(requests=int(d("vllm:request_success_total")),
                      ttft_ms=mean_ms("vllm:time_to_first_token_seconds"),
                      itl_ms=mean_ms("vllm:inter_token_latency_seconds"),
                      prefix_hit_tokens=int(hits) if "vllm:prefix_cache_hits_total" in after
                      else None,
                      prefix_query_tokens=int(queries) if queries else None)


class ServerViews:
    """Snapshots per endpoint; the snapshot after one request is the next one's "before",
    so only the first request of a server waits for a scrape before it is sent."""

    def __init__(self, settle_s: float = 0.05, aside_wait_s: float = 5.0) -> None:
        self._last: dict[str, dict[str, float] | None] = {}
        self._asides: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self.settle_s, self.aside_wait_s = settle_s, aside_wait_s

    def aside(self, endpoint, key: str = "") -> Callable[[bool], None]:  # config.Endpoint
        """A request of conversation `key` that is no turn's own (a prefill), announced
        before it is sent: that conversation's next request waits for it (`before`), so
        the turn's figures are its own and its prompt finds the prefix. Call the returned
        function once it is over (`ran`: it reached the server; the next window starts
        after it)."""
        done, slot = threading.Event(), (endpoint.base_url, key)
        with self._lock:
            self._asides[slot] = done

        def over(ran: bool) -> None:
            if ran:
                self._settled(endpoint)
            with self._lock:
                if self._asides.get(slot) is done:
                    del self._asides[slot]
            done.set()

        return over

    def before(self, endpoint, key: str = "") -> dict[str, float] | None:
        """The snapshot a request of conversation `key` starts from, once that
        conversation's request aside is over (at most `aside_wait_s`)."""
        with self._lock:
            pending = self._asides.get((endpoint.base_url, key))
        if pending is not None:
            pending.wait(self.aside_wait_s)
        with self._lock:
            if endpoint.base_url in self._last:
                return self._last[endpoint.base_url]
        snap = snapshot(endpoint.base_url)
        with self._lock:
            self._last[endpoint.base_url] = snap
        return snap

    def after(self, endpoint, before: dict[str, float] | None) -> ServerView | None:
        if before is None:
            with self._lock:
                self._last.pop(endpoint.base_url, None)  # try again next time
            return None
        return between(before, self._settled(endpoint))

    def _settled(self, endpoint) -> dict[str, float] | None:
        """The snapshot once a request is over, kept as the next one's "before"."""
        time.sleep(self.settle_s)  # the server records a request just after its last chunk
        snap = snapshot(endpoint.base_url)
        with self._lock:
            self._last[endpoint.base_url] = snap
        return snap
