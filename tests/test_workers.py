"""`python -m app --workers N`: the app N times behind HAProxy on one port. The flags each
worker gets, the balancer's configuration (checked by HAProxy itself), and, with two real
workers on the tests' servers over HTTPS with a login: sessions spread and kept on their
worker (scripts and a page), a spoken turn through the balancer (heard by the parent's ASR
and read by its shared voice), each worker's /metrics,
a killed worker started again, and nothing left running after SIGTERM."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families

from app.ops.cli import from_args, parse
from app.ops.launch import AppServer
from app.ops.workers import (
    COOKIE,
    haproxy_binary,
    haproxy_config,
    split_cpus,
    split_slots,
    worker_argv,
)
from app.web.client import VoiceClient
from tests.conftest import ASSETS, AUTH, ROOT, app_args, eventually, get, self_signed


def test_slots_and_cores_are_shared_out():
    assert split_slots(0, 3) == [0, 0, 0]  # no limit anywhere
    assert split_slots(32, 4) == [8, 8, 8, 8]
    assert split_slots(5, 2) == [3, 2]
    with pytest.raises(SystemExit, match="fewer than --workers"):
        split_slots(1, 2)  # a worker with 0 slots would have no limit
    assert split_cpus(tuple(range(16)), 4)[1] == (1, 5, 9, 13)
    assert split_cpus((0,), 2) == [(0,), (0,)]


def test_a_workers_flags_win_over_the_users_and_start_no_server():
    user = ["--demo", "--port", "80", "--host", "0.0.0.0", "--auth", "a:b", "--workers", "4",
            "--max-sessions", "32", "--ssl-certfile", "/c.pem", "--max-tokens", "30"]
    argv = worker_argv(user, 40001, 8, (1, 5), {"--base-url": "http://127.0.0.1:8000/v1",
                                                "--model": "m", "--asr-host": "/x/asr.sock"})
    args = parse(argv)
    assert args.worker and args.demo and args.workers == 1  # demo settings, no server
    assert (args.host, args.port, args.max_sessions) == ("127.0.0.1", 40001, 8)
    assert args.ssl_certfile == "" and args.max_tokens == 30  # TLS ends at the balancer
    cfg = from_args(args)
    assert cfg.cpus == (1, 5) and cfg.auth == ("a", "b")
    assert cfg.asr.host == "/x/asr.sock"  # the parent's ASR, shared by all workers
    assert cfg.primary.base_url == "http://127.0.0.1:8000/v1" and cfg.primary.model == "m"


def test_haproxy_accepts_its_configuration(tmp_path):
    cert, key = self_signed(tmp_path)
    pem = tmp_path / "site.pem"
    pem.write_text(cert.read_text() + key.read_text())
    for text in (haproxy_config("127.0.0.1", 7860, [40001, 40002]),
                 haproxy_config("::1", 443, [40001, 40002, 40003], pem)):
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(text)
        done = subprocess.run([haproxy_binary(), "-c", "-f", str(cfg)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "bind [::1]:443 ssl crt" in text and f"cookie {COOKIE} insert" in text
    assert text.count("server w3 127.0.0.1:40003") == 2  # the sessions' and /metrics'


def children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.fixture(scope="module")
def workers(endpoint, tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    app = AppServer([*app_args(endpoint, max_tokens=20),
                     "--workers", "2", "--max-sessions", "4", "--auth", ":".join(AUTH),
                     "--tts-shared",
                     "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
                    log_path=ROOT / "logs" / "app-tests-workers.log",
                    verify=ssl.create_default_context(cafile=str(cert)))
    app.start()
    try:
        app.wait_healthy(timeout_s=600)
        yield app
    finally:
        app.stop()


@contextmanager
def logs_on_failure(*paths: Path, lines: int = 30):
    """A failure here carries the last lines of the processes' logs (CI keeps no files)."""
    try:
        yield
    except Exception as exc:
        tails = [f"--- {p.name}:\n" + "\n".join(
            p.read_text(errors="replace").splitlines()[-lines:]) for p in paths if p.exists()]
        raise AssertionError(f"{exc!r}\n" + "\n".join(tails)) from exc


def live(app: AppServer, worker: int) -> float:
    text = get(app, f"workers/{worker}/metrics").text
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "voice_agent_sessions_active")


@pytest.mark.integration
def test_sessions_spread_over_the_workers_and_stay_on_theirs(workers):
    from playwright.sync_api import sync_playwright

    from bench.page import ARGS, CHROMIUM

    assert get(workers, "agent/health").json()["max_sessions"] == 2  # each worker's share
    hint = get(workers, "metrics")
    assert hint.status_code == 404 and "/workers/2/metrics" in hint.text
    assert get(workers, "workers/1/metrics", auth=None).status_code == 401  # its login
    speech, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    logs = [workers.log_path, *(ROOT / "logs" / n for n in
                                ("app-worker-1.log", "app-worker-2.log", "haproxy.log"))]
    with logs_on_failure(*logs), \
            VoiceClient(workers.url, auth=AUTH, verify=workers.verify) as a, \
            VoiceClient(workers.url, auth=AUTH, verify=workers.verify) as b:
        held = {a._http.cookies[COOKIE], b._http.cookies[COOKIE]}
        assert held == {"w1", "w2"}  # the second caller went to the idle worker
        assert live(workers, 1) == live(workers, 2) == 1
        for client in (a, b):  # a spoken turn on each, over wss through the balancer
            reply = client.say(speech)
            assert reply.audio.size > 0 and reply.first_audio_ms is not None
            rows = client.export()  # the records are on the session's own worker
            assert [r["endpoint"] for r in rows] == ["primary"] and not rows[0]["error"]
    eventually(lambda: live(workers, 1) == live(workers, 2) == 0)
    # both turns were heard by the parent's one ASR and read by its one voice: no worker
    # loaded a model of its own
    parent = workers.log_path.read_text()
    assert "Loading the ASR all workers share" in parent
    assert "Voice shared by the workers" in parent
    for i in (1, 2):
        ready = [line for line in (ROOT / "logs" / f"app-worker-{i}.log").read_text(
            errors="replace").splitlines() if line.startswith("ASR ready")]
        assert ready and "the parent's, shared by all workers" in ready[-1]
    with sync_playwright() as pw:  # a page: Gradio's routes and the audio channel
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(ignore_https_errors=True)
        ctx.request.post(workers.url + "login",
                         form=dict(zip(("username", "password"), AUTH, strict=True)))
        page = ctx.new_page()
        page.goto(workers.url)
        page.wait_for_function("() => window.voiceAgent && window.voiceAgent.ready",
                               timeout=60000)
        worker = next(c["value"] for c in ctx.cookies() if c["name"] == COOKIE)
        assert live(workers, int(worker[1:])) == 1 and live(workers, 3 - int(worker[1:])) == 0
        browser.close()


@pytest.mark.integration
def test_a_killed_worker_is_started_again_and_sigterm_leaves_nothing(workers):
    apps = [p for p in children(workers.proc.pid) if "-m app" in command(p)]
    balancer = [p for p in children(workers.proc.pid) if "haproxy" in command(p)]
    assert len(apps) == 2 and len(balancer) == 1
    os.kill(apps[0], signal.SIGKILL)
    again = eventually(lambda: [p for p in children(workers.proc.pid)
                                if "-m app" in command(p) and p not in apps], timeout_s=30)
    assert len(again) == 1
    # the other worker served on meanwhile; the new one answers once its models are loaded
    eventually(lambda: all(get(workers, f"workers/{i}/metrics").status_code == 200
                           for i in (1, 2)), timeout_s=300)
    workers.stop()  # SIGTERM to the app's process group, as a service manager sends
    assert workers.proc.wait(timeout=30) is not None
    for pid in [*apps[1:], *again, *balancer]:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in \
            Path(f"/proc/{pid}/status").read_text()
    with pytest.raises(httpx.ConnectError):
        httpx.get(workers.url + "agent/health", verify=workers.verify, timeout=5)
