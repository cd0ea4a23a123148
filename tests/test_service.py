"""The app as a shared service, one real app for every check here: HTTPS from its own flags
(a certificate made here), `/metrics` behind its credentials after real spoken turns, and
`--max-sessions 1`: the second conversation is refused (a script with 503, a page with the
notice) until the first goes away."""

from __future__ import annotations

import ssl

import httpx
import numpy as np
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families

from app.ops.launch import AppServer
from app.stages.endofturn import TurnConfig
from app.web.client import AgentBusy, VoiceClient
from app.web.hub import BUSY, RETRY_AFTER_S
from app.web.prometheus import STAGE_FIGURES
from tests.conftest import (
    ASSETS,
    AUTH,
    ROOT,
    app_args,
    app_log,
    eventually,
    get,
    log_lines,
    self_signed,
)

pytestmark = pytest.mark.integration
LOG = ROOT / "logs" / "app-tests-service.log"


@pytest.fixture(scope="module")
def service(endpoint, anchor_server, tmp_path_factory):
    """The app on the tests' servers over HTTPS, with a login and one conversation at most."""
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    trust = ssl.create_default_context(cafile=str(cert))
    app = AppServer([*app_args(endpoint, anchor_server),
                     "--auth", ":".join(AUTH), "--max-sessions", "1",
                     "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
                    log_path=LOG, verify=trust)
    app.start()
    try:
        app.wait_healthy()
        yield app
    finally:
        app.stop()


def scrape(app: AppServer) -> dict[tuple[str, tuple], float]:
    """/metrics parsed: (sample name, sorted labels) -> value."""
    resp = get(app, "metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def live(app: AppServer) -> float:
    return value(scrape(app), "voice_agent_sessions_active")


def test_https_with_the_apps_own_certificate(service):
    assert service.url.startswith("https://")
    health = get(service, "agent/health").json()
    assert health["ok"] and health["max_sessions"] == 1
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(service.url + "agent/health", auth=AUTH, timeout=10)  # not trusted
    with pytest.raises(httpx.TransportError):  # the port speaks TLS only
        httpx.get(service.url.replace("https", "http") + "agent/health", auth=AUTH, timeout=10)


def test_metrics_want_the_credentials_and_hold_each_finished_turn(service):
    for auth in (None, ("ann", "wrong")):
        assert get(service, "metrics", auth=auth).status_code == 401
    clips = ["en_capital.wav", "en_weather.wav"]
    since = log_lines(LOG)
    with VoiceClient(service.url, auth=AUTH, verify=service.verify) as client:  # over wss
        assert live(service) == 1
        for i, clip in enumerate(clips):
            speech, _ = sf.read(ASSETS / clip, dtype="float32")
            # the next question after a pause longer than `--turn-continue-ms`: within it,
            # the voice coming back goes on from the last turn, and the two questions are
            # one turn with one anchor record (this test's failure on a fast box: a reply
            # of 185 ms played out, and the second question, 1.1 s later, joined the first)
            wait = np.zeros(int((TurnConfig.continue_ms + 500) * 16) if i else 0, np.float32)
            client.say(np.concatenate([wait, speech]))

        def turns() -> dict[tuple, float]:
            return {labels: v for (name, labels), v in scrape(service).items()
                    if name == "voice_agent_turns_total"}

        # the last record is final once the player said done; the anchor's once it ran
        # (its requests, one at a time once the conversation is idle, took up to 7 s each
        # on an AVX2 EPYC: the wait is not what this checks)
        eventually(lambda: value(scrape(service), "voice_agent_turns_total", endpoint="anchor",
                                 source="voice", outcome="ok") == len(clips), timeout_s=90,
                   why=lambda: "\n".join([f"turns: {turns()}", *app_log(LOG, since)]))
        rows = client.export()
    eventually(lambda: live(service) == 0)  # the script's channel closed: its slot is free
    samples = scrape(service)
    primary = [r for r in rows if r["endpoint"] == "primary"]
    assert len(primary) == len(clips) and not any(r["error"] for r in primary)
    assert value(samples, "voice_agent_turns_total", endpoint="primary", source="voice",
                 outcome="ok") == len(clips)
    for field, stage in STAGE_FIGURES.items():  # the histograms hold the records' figures
        labels = dict(endpoint="primary", source="voice", stage=stage)
        figures = [r[field] / 1000 for r in primary if r[field] is not None]
        if stage != "interrupt_to_silence":
            assert len(figures) == len(clips), stage
        assert value(samples, "voice_agent_stage_seconds_count", **labels) == len(figures)
        assert value(samples, "voice_agent_stage_seconds_sum", **labels) == \
            pytest.approx(sum(max(f, 0.0) for f in figures), abs=1e-6), stage
    v2v = dict(endpoint="primary", source="voice", stage="voice_to_voice")
    assert value(samples, "voice_agent_stage_seconds_bucket", le="+Inf", **v2v) == len(clips)
    anchor_ttft = value(samples, "voice_agent_stage_seconds_count", endpoint="anchor",
                        source="voice", stage="ttft")
    assert anchor_ttft == len(clips)


def test_beyond_max_sessions_a_script_and_a_page_are_refused_until_one_goes_away(service):
    from playwright.sync_api import sync_playwright

    from bench.page import ARGS, CHROMIUM

    eventually(lambda: live(service) == 0)
    refused = value(scrape(service), "voice_agent_sessions_refused_total")
    first = VoiceClient(service.url, auth=AUTH, verify=service.verify).open()
    resp = httpx.post(service.url + "agent/session", auth=AUTH, verify=service.verify,
                      timeout=10)
    assert resp.status_code == 503 and resp.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert resp.json()["message"] == BUSY
    with pytest.raises(AgentBusy, match="busy") as busy:
        VoiceClient(service.url, auth=AUTH, verify=service.verify).open()
    assert busy.value.retry_after_s == RETRY_AFTER_S
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(ignore_https_errors=True)  # the page's own certificate
        ctx.request.post(service.url + "login", form=dict(zip(("username", "password"), AUTH,
                                                             strict=True)))
        page = ctx.new_page()
        page.goto(service.url)
        # written on the page, and spoken: the notice came as reply audio on its channel
        page.wait_for_function("() => window.voiceAgent && window.voiceAgent.busy"
                               " && window.voiceAgent.chunks >= 1", timeout=60000)
        assert BUSY in page.inner_text("#va-status") and BUSY in page.inner_text("#va-mic")
        assert value(scrape(service), "voice_agent_sessions_refused_total") == refused + 3
        first.close()  # the script's conversation is over: a page gets the slot
        eventually(lambda: live(service) == 0)
        other = ctx.new_page()
        other.goto(service.url)
        other.wait_for_function("() => window.voiceAgent && window.voiceAgent.ready",
                                timeout=60000)
        assert BUSY not in other.inner_text("#va-status") and live(service) == 1
        assert httpx.post(service.url + "agent/session", auth=AUTH, verify=service.verify,
                          timeout=10).status_code == 503
        other.close()  # the tab closes: Gradio's unload frees its slot
        eventually(lambda: httpx.post(service.url + "agent/session", auth=AUTH,
                                      verify=service.verify, timeout=10).status_code == 200,
                   timeout_s=20)
        browser.close()
