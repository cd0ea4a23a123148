"""The app's `/metrics` for Prometheus: each finished turn's stage figures as histograms per
endpoint, turns by outcome, and the live, allowed and refused sessions.

Only a finished record is read (`Turn.on_final`, once per record): the figures are the
ones the page and the export show, in seconds. A turn that failed is counted by its
outcome; its figures are left out, as the page's medians leave them out. A registry per
app, so several apps in one process (tests) keep their own figures.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from app.metrics import TurnMetrics

STAGE_FIGURES = {
    "v2v_ms": "voice_to_voice",
    "eot_wait_ms": "end_of_turn_wait",
    "asr_ms": "asr",
    "ttft_ms": "ttft",
    "first_piece_ms": "first_piece",
    "tts_first_audio_ms": "tts_first_audio",
    "transport_ms": "transport",
    "playback_ms": "playback_start",
    "interrupt_ms": "interrupt_to_silence",
    "handoff_ms": "handoffs",
}
"""TurnMetrics field (its docstring says from which event to which) -> the `stage` label."""
BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
             1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)
"""Voice latencies: even steps where a turn's stages and a GPU's voice-to-voice fall
(docs/PERFORMANCE.md), finer ones below for the transport and the player's silence, up to
the seconds of a CPU's voice-to-voice."""


class AppMetrics:
    def __init__(self, hub) -> None:  # app.web.hub.SessionHub
        self.registry = CollectorRegistry()
        self.stages = Histogram(
            "voice_agent_stage_seconds", "A finished turn's stage, from the event its figure "
            "starts at to the one it ends at (app/metrics.py TurnMetrics)",
            ["endpoint", "source", "stage"], buckets=BUCKETS_S, registry=self.registry)
        self.turns = Counter(
            "voice_agent_turns", "Finished turns by outcome: ok, interrupted, or the stage "
            "that failed", ["endpoint", "source", "outcome"], registry=self.registry)
        self.registry.register(SessionFigures(hub))

    def observe(self, m: TurnMetrics) -> None:
        """One finished record (from any thread)."""
        outcome = m.error_stage or ("interrupted" if m.cancelled else "ok")
        self.turns.labels(m.endpoint, m.source, outcome).inc()
        if m.error:
            return
        for name, stage in STAGE_FIGURES.items():
            value = getattr(m, name)
            if value is not None:
                # a clock offset can make a short span come out a hair below zero; a
                # histogram's sum must not go down (rate() would read a reset)
                self.stages.labels(m.endpoint, m.source, stage).observe(max(value, 0.0) / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class SessionFigures(Collector):
    """The hub's figures, read when Prometheus scrapes (the hub is their one writer)."""

    def __init__(self, hub) -> None:  # app.web.hub.SessionHub
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("voice_agent_sessions_active",
                                "Live conversations: pages open, scripts connected",
                                value=self.hub.live)
        yield GaugeMetricFamily("voice_agent_sessions_max",
                                "Live conversations allowed (--max-sessions; 0: no limit)",
                                value=self.hub.max_live)
        yield CounterMetricFamily("voice_agent_sessions_refused",
                                  "Pages and scripts told the agent is busy",
                                  value=self.hub.refused)
