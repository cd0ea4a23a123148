"""What this machine is: CPU model, cores, the instruction sets that change which kernels
run (AVX2 / AVX-512 / VNNI / BF16 / AMX) and the ISA caps set in the environment. The demo
chooses its CPU settings from it (app/launch.py) and says so on the page; every benchmark's
table names it."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
       "amx_int8")
CAPS = ("CT2_FORCE_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


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


def describe(m: dict) -> str:
    """One line for a table's caption: "AMD EPYC, 2 cores, avx2 fma"."""
    caps = ", ".join(f"{k}={v}" for k, v in m["isa_caps"].items())
    gpu = f" + {len(m['gpus'])}x {m['gpus'][0]}" if m.get("gpus") else ""
    return f"{m['cpu']}, {m['cores']} cores, {' '.join(m['isa']) or 'no AVX2'}" + \
        (f" (capped: {caps})" if caps else "") + gpu
