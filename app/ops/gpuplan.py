"""GPU hosts: where both checkpoints of the A/B go (`--launch`), by memory, with the model
card's flags, and the vLLM servers for them."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from app.ops.launch import CARD_FLAGS, VOICE_FLAGS, VllmServer
from app.paths import ROOT

PRIMARY_WEIGHTS_GIB = 18.6  # the card: weights in vLLM, low-latency build
ANCHOR_WEIGHTS_GIB = 22.2  # the card: the experts-only INT4 anchor
RUNTIME_GIB = 1.5  # CUDA context, graphs and activations per server, about


@dataclass(frozen=True)
class GpuPlan:
    name: str
    model: str
    gpu: int
    fraction: float
    weights_gib: float
    kv_gib: float


def plan_gpus(primary: str, anchor: str | None, gpu_gib: list[float]) -> list[GpuPlan]:
    """One server per GPU when there are two; else both share GPU 0 by memory fraction."""
    if not gpu_gib:
        raise SystemExit("--launch needs an NVIDIA GPU (nvidia-smi found none).")
    jobs = [("primary", primary, PRIMARY_WEIGHTS_GIB)]
    if anchor:
        jobs.append(("anchor", anchor, ANCHOR_WEIGHTS_GIB))
    shared = len(jobs) == 2 and len(gpu_gib) < 2
    plans = []
    for i, (name, model, weights) in enumerate(jobs):
        gpu = 0 if shared else i
        total = gpu_gib[gpu]
        fraction = round(0.92 * (weights + RUNTIME_GIB) / (PRIMARY_WEIGHTS_GIB +
                         ANCHOR_WEIGHTS_GIB + 2 * RUNTIME_GIB), 2) if shared else 0.9
        kv = round(fraction * total - weights - RUNTIME_GIB, 1)
        if kv < 1.0:
            raise SystemExit(f"{name} does not fit: {fraction:.2f} x {total:.0f} GiB leaves "
                             f"{kv} GiB for the KV cache after {weights} GiB of weights. "
                             "Use a second GPU or a larger one.")
        plans.append(GpuPlan(name, model, gpu, fraction, weights, kv))
    return plans


def gpu_memory_gib() -> list[float]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                              "nounits"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(x) / 1024 for x in out.stdout.split()]


# vLLM picks Machete (CUTLASS) for dense W4A16 layers on Hopper; with these two disabled it
# takes Marlin: faster a token at one stream, slower at several (docs/PERFORMANCE.md). A
# voice user is one stream.
MARLIN_DENSE = {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel,CutlassW4A16LinearKernel"}


def gpu_servers(plans: list[GpuPlan], served: dict[str, str], base_port: int = 8000,
                vllm_cmd: str = "", extra: list[str] = (),
                dense_int4_kernel: str = "marlin") -> list[VllmServer]:
    from app.stages.llm import DRY_RUN_MARKER

    shared = len({p.gpu for p in plans}) < len(plans)
    servers = []
    for i, plan in enumerate(plans):
        # a `python -m build dry-run` directory has no weights: vLLM makes random ones
        dummy = ["--load-format", "dummy"] if (Path(plan.model) / DRY_RUN_MARKER).exists() \
            else []
        # two servers starting at once on one GPU each see the other's memory in their
        # profiling: the plan's KV budget, fixed, lets both start side by side
        kv = ["--kv-cache-memory-bytes", str(int(plan.kv_gib * 2**30))] if shared else []
        server = VllmServer(model=plan.model, served_name=served[plan.name], port=base_port + i,
                            extra_args=[*CARD_FLAGS, *VOICE_FLAGS, *dummy, *kv, *extra,
                                        "--gpu-memory-utilization", str(plan.fraction)],
                            env={"CUDA_VISIBLE_DEVICES": str(plan.gpu),
                                 **(MARLIN_DENSE if dense_int4_kernel == "marlin" else {})},
                            # not .venv-vllm: that is the CPU build
                            python=vllm_cmd or sys.executable,
                            log_path=ROOT / "logs" / f"vllm-{plan.name}.log")
        servers.append(server)
    return servers


def format_plan(plans: list[GpuPlan], gpu_gib: list[float]) -> str:
    lines = ["GPU memory plan:"]
    for p in plans:
        lines.append(f"  {p.name:8s} GPU {p.gpu} ({gpu_gib[p.gpu]:.0f} GiB) x {p.fraction:.2f}: "
                     f"weights {p.weights_gib} GiB + runtime ~{RUNTIME_GIB} GiB + KV cache "
                     f"{p.kv_gib} GiB  <- {p.model}")
    return "\n".join(lines)
