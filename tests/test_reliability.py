"""Faults on loopback with the real parts: concurrent sessions, a model server killed
mid-reply and restarted, a shared app without credentials, secrets kept out of sight.
Measured figures go to tests/artifacts/reliability.json (docs/RELIABILITY.md quotes them)."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AuthenticationError

from app.config import AppConfig
from app.core.pipeline import Agent
from app.core.session import Session
from app.ops.launch import AppServer
from app.stages.llm import Endpoint, LlmConfig
from app.stages.tts.base import TtsConfig
from app.web.client import VoiceClient
from tests.conftest import (
    ARTIFACTS,
    ASSETS,
    ROOT,
    TRANSCRIPTS,
    app_args,
    run_turn,
    serving,
    word_recall,
)

pytestmark = pytest.mark.integration
FIGURES: dict = {}


def record(**figures) -> None:
    FIGURES.update(figures)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "reliability.json").write_text(json.dumps(FIGURES, indent=1))


def test_five_sessions_at_once_keep_their_own_conversations(app_url):
    clips = ["en_capital.wav", "en_joke.wav", "en_weather.wav", "en_hello.wav",
             "en_capital_48k_stereo.wav"]

    def converse(clip: str) -> tuple[str, list, list]:
        client = Client(app_url, verbose=False)
        first = client.predict(handle_file(ASSETS / clip), api_name="/voice_turn")
        second = client.predict(handle_file(ASSETS / clip), api_name="/voice_turn")
        return clip, first, second

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=5) as pool:
        results = list(pool.map(converse, clips))
    elapsed = time.monotonic() - t0
    for clip, first, second in results:
        for transcript, reply, audio, metrics in (first, second):
            assert word_recall(TRANSCRIPTS[clip], transcript) >= 0.8, (clip, transcript)
            assert reply and audio and not metrics["error"]
        assert (first[3]["turn_id"], second[3]["turn_id"]) == (1, 2)  # own numbering
        assert second[3]["prompt_tokens"] > first[3]["prompt_tokens"]  # own history only
    record(concurrent_sessions=5, concurrent_turns=10, concurrent_wall_s=round(elapsed, 1))


@pytest.fixture
def own_server():
    yield from serving(log_name="vllm-tests-restart.log")


def test_model_server_killed_mid_reply_then_back(own_server):
    ep = Endpoint("primary", own_server.base_url, own_server.served_name)
    cfg = AppConfig(primary=ep, persona=ROOT / "persona" / "small-en.md", language="en",
                    llm=LlmConfig(max_tokens=200, repetition_penalty=1.15, timeout_s=10),
                    tts=TtsConfig(engine="offline"))
    agent = Agent(cfg)
    agent.setup()
    session = Session("restart")
    chunks: list = []

    def turn(i: int, text: str):
        m, spoken = run_turn(agent, session, text)
        chunks.extend(spoken)
        return m

    result = {}
    worker = threading.Thread(target=lambda: result.update(m=turn(1, "Tell me a long story "
                                                                       "about a dragon.")))
    worker.start()
    while not (session.chat and len(session.chat[-1]["content"]) > 20):
        time.sleep(0.01)
    own_server.kill()
    worker.join(timeout=60)
    m = result["m"]
    assert m.error_stage == "llm" and m.error  # the user is told
    partial = session.history[-1]
    assert partial["role"] == "assistant" and len(partial["content"]) > 20  # kept
    assert session.chat[-2]["content"].endswith("[cut off]")  # and marked
    assert "⚠" in session.chat[-1]["content"]
    # while the server is down, a turn fails fast with a clear message
    t0 = time.monotonic()
    down = turn(2, "Are you there?")
    fail_s = time.monotonic() - t0
    assert down.error_stage == "llm" and "cannot reach" in down.error
    # the server comes back on the same port; the same agent answers, no restart
    t0 = time.monotonic()
    own_server.start()
    own_server.wait_healthy(timeout_s=900)
    back = turn(3, "Hello again!")
    recovery_s = time.monotonic() - t0
    assert not back.error and back.reply_tokens > 0
    assert [h["role"] for h in session.history] == ["user", "assistant"] * 2
    record(killed_mid_reply_partial_chars=len(partial["content"]),
           down_turn_fail_s=round(fail_s, 2), server_restart_to_answer_s=round(recovery_s, 1))


def test_shared_app_requires_credentials(endpoint, tmp_path):
    """Bound beyond loopback (all interfaces), asked only at 127.0.0.1: every route wants the
    credentials or a session id the server issued, wherever the request comes from."""
    # 127.0.0.2 is loopback but not "localhost": it counts as listening elsewhere
    refused = AppServer([*app_args(endpoint), "--host", "127.0.0.2"],
                        log_path=tmp_path / "refused.log").start()
    assert refused.proc.wait(timeout=120) != 0
    assert "without --auth" in (tmp_path / "refused.log").read_text()
    app = AppServer([*app_args(endpoint), "--host", "0.0.0.0", "--auth", "ann:s3cret",
                     "--api-key", "sk-never-shown-123"], log_path=tmp_path / "shared.log")
    app.start()
    try:
        app.wait_healthy()  # with the credentials
        url = app.url  # 127.0.0.1
        routes = (("agent/health", "GET"), ("agent/session", "POST"),
                  ("agent/export/any.json", "GET"))
        for path, method in routes:
            for auth in (None, "ann:wrong", "bob:s3cret"):
                req = urllib.request.Request(url + path, method=method)
                if auth:
                    req.add_header("Authorization",
                                   "Basic " + base64.b64encode(auth.encode()).decode())
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(req, timeout=10)
                assert err.value.code == 401, (path, auth)
        sid = httpx.post(url + "agent/session", auth=app.credentials, timeout=10).json()["sid"]
        assert len(sid) >= 24  # a secret, not a counter
        with pytest.raises(AuthenticationError, match="credentials were not provided"):
            Client(url, verbose=False).predict("hi", api_name="/text_turn")
        client = Client(url, auth=("ann", "s3cret"), verbose=False)
        out = client.predict(handle_file(ASSETS / "en_hello.wav"), api_name="/voice_turn")
        assert out[1]
        exported = open(client.predict(api_name="/export_json")).read()
        page = json.dumps(client.config)  # everything the page is built from
        log = (tmp_path / "shared.log").read_text()
        for text in (exported, page, log, json.dumps(out[3])):
            assert "sk-never-shown-123" not in text
        assert "warning: listening on 0.0.0.0" in log
        # the audio channel serves the issued id (a script's session), and nothing else
        with VoiceClient(url, auth=("ann", "s3cret")) as voice:
            assert voice.sid != sid and voice.export() == []
        # the export wants the credentials as well as an issued id
        assert httpx.get(f"{url}agent/export/{sid}.json", timeout=10).status_code == 401
        with pytest.raises(ConnectionError, match="unknown session"):
            VoiceClient(url).open(sid="chosen-by-the-client")
    finally:
        app.stop()
