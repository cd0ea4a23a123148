"""The app's /metrics figures from finished records, and the Grafana dashboard's queries."""

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from app.metrics import TurnMetrics
from app.web.hub import Busy, SessionHub
from app.web.prometheus import BUCKETS_S, STAGE_FIGURES, AppMetrics
from tests.conftest import ROOT


def families(figures: AppMetrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(figures.render().decode())}


def sample(fams: dict, name: str, suffix: str = "", **labels) -> float | None:
    for s in fams[name].samples:
        if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_each_stage_figure_is_a_field_of_the_record_with_its_events():
    for name in STAGE_FIGURES:
        assert name in TurnMetrics.__dataclass_fields__, name
    assert BUCKETS_S[0] <= 0.05 and BUCKETS_S[-1] == 5.0 and list(BUCKETS_S) == sorted(BUCKETS_S)


def test_finished_records_fill_the_histograms_per_endpoint():
    figures = AppMetrics(SessionHub())
    figures.observe(TurnMetrics(1, "primary", v2v_ms=820.0, asr_ms=140.0, ttft_ms=95.0,
                                transport_ms=-0.4))
    figures.observe(TurnMetrics(2, "primary", v2v_ms=1900.0, cancelled=True, interrupt_ms=31.0))
    figures.observe(TurnMetrics(1, "anchor", ttft_ms=130.0))
    figures.observe(TurnMetrics(3, "primary", asr_ms=99.0, error_stage="llm", error="down"))
    fams = families(figures)
    h = "voice_agent_stage_seconds"
    v2v = dict(endpoint="primary", source="voice", stage="voice_to_voice")
    assert sample(fams, h, "_count", **v2v) == 2
    assert abs(sample(fams, h, "_sum", **v2v) - 2.72) < 1e-9  # seconds
    assert sample(fams, h, "_bucket", le="1.0", **v2v) == 1
    assert sample(fams, h, "_count", endpoint="anchor", stage="ttft") == 1
    assert sample(fams, h, "_count", endpoint="primary", stage="interrupt_to_silence") == 1
    assert sample(fams, h, "_sum", stage="transport") == 0.0  # a clock hair below zero
    # a failed turn is counted by the stage that failed; its figures are left out
    assert sample(fams, h, "_count", endpoint="primary", stage="asr") == 1
    turns = "voice_agent_turns"
    assert sample(fams, turns, "_total", endpoint="primary", outcome="ok") == 1
    assert sample(fams, turns, "_total", endpoint="primary", outcome="interrupted") == 1
    assert sample(fams, turns, "_total", endpoint="primary", outcome="llm") == 1
    assert sample(fams, turns, "_total", endpoint="anchor", outcome="ok") == 1


def test_sessions_are_read_from_the_hub_when_scraped():
    hub = SessionHub(max_live=1)
    figures = AppMetrics(hub)
    hub.create()
    try:
        hub.create()
    except Busy:
        pass
    fams = families(figures)
    assert sample(fams, "voice_agent_sessions_active") == 1
    assert sample(fams, "voice_agent_sessions_max") == 1
    assert sample(fams, "voice_agent_sessions_refused", "_total") == 1


def test_two_apps_in_one_process_keep_their_own_figures():
    a, b = AppMetrics(SessionHub()), AppMetrics(SessionHub())
    a.observe(TurnMetrics(1, "primary", ttft_ms=50.0))
    assert sample(families(b), "voice_agent_stage_seconds", "_count", stage="ttft") is None


def test_the_dashboard_asks_for_what_the_app_exports():
    dash = json.loads((ROOT / "docs" / "grafana-voice-agent.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    names = {"voice_agent_stage_seconds_bucket", "voice_agent_turns_total",
             "voice_agent_sessions_active", "voice_agent_sessions_max",
             "voice_agent_sessions_refused_total"}
    used = {n for e in exprs for n in re.findall(r"voice_agent_\w+", e)}
    assert used == names, used ^ names
    staged = {m for e in exprs for m in re.findall(r'stage="(\w+)"', e)}
    assert staged == set(STAGE_FIGURES.values())
    for stage in STAGE_FIGURES.values():  # p50 and p90 of each
        for q in ("0.5", "0.9"):
            assert any(f"histogram_quantile({q}," in e and f'stage="{stage}"' in e
                       for e in exprs), (stage, q)
    assert all(e.count("(") == e.count(")") for e in exprs)
