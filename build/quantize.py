"""Regenerate the low-latency checkpoint: the model card's "Calibration & reproduce".

Stages: check the base -> calibration set -> load (MoE experts linearized) -> GPTQ W4A16
(sym, group 128, actorder=weight, dampening 0.01, every expert calibrated) -> export
(compressed-tensors pack-quantized) -> the three fix-ups the exporter does not do (BF16
`mtp.*` tensors copied back and ignored; INT8 g128 lm_head as group_1; upstream tokenizer
and config files byte for byte) -> inspect against the layout -> rename into place.

Written into a hidden `.NAME.partial-PID` directory beside the target, carrying a BUILDING
marker until it has been inspected, so an interrupted run leaves nothing that looks like a
finished checkpoint (and `inspect` refuses it). Runs in the build environment
(.venv-build: llm-compressor's pins clash with vLLM's).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from build import calib, layouts
from build.checkpoint import BUILD_INFO, BUILDING, check, read, read_header, render, summary

# Copied from the base checkpoint verbatim (transformers re-serialises some on save).
UPSTREAM_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                  "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                  "generation_config.json", "preprocessor_config.json",
                  "video_preprocessor_config.json"]
MTP_SHARD = "model-mtp.safetensors"
INDEX = "model.safetensors.index.json"


class BuildError(RuntimeError):
    pass


@dataclass
class Options:
    model: str
    out: Path
    layout: str = "lowlat"
    calib: Path | None = None
    general: Path | None = None
    persona: Path | None = None
    samples: int = 384
    seq_len: int = 2048
    device: str = "auto"
    offload_device: str = "cpu"
    force: bool = False
    seed: int = 0
    progress: bool = True


class Stages:
    """A progress bar over the build's stages, with the time each took."""

    NAMES = ["check base", "calibration set", "load model", "GPTQ", "export", "fix-ups",
             "inspect", "finish"]

    def __init__(self, progress: bool):
        from tqdm import tqdm

        self.bar = tqdm(total=len(self.NAMES), disable=not progress, unit="stage",
                        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}]")
        self.times: dict[str, float] = {}
        self._t = time.time()

    def __call__(self, name: str) -> None:
        self.bar.set_description(name)

    def done(self, name: str) -> None:
        now = time.time()
        self.times[name] = round(now - self._t, 2)
        self._t = now
        self.bar.update(1)


def select_device(device: str) -> None:
    """`auto`: llm-compressor's choice (the first GPU, else the CPU); `cpu`; `cuda:N`.
    Set through CUDA_VISIBLE_DEVICES before torch touches CUDA."""
    if device == "auto":
        return
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif device.startswith("cuda:") and device[5:].isdigit():
        os.environ["CUDA_VISIBLE_DEVICES"] = device[5:]
    else:
        raise BuildError(f"--device {device!r}: use auto, cpu or cuda:N")


def resolve_base(model: str) -> Path:
    """A local directory, or a Hub id fetched with huggingface_hub (needs the network)."""
    p = Path(model).expanduser()
    if p.exists():
        return p
    if "/" not in model or model.startswith((".", "/")):
        raise BuildError(f"{model}: no such directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model))
    except Exception as exc:  # noqa: BLE001 - every hub failure reads the same to a user
        raise BuildError(f"{model}: not a local directory and the Hub download failed "
                         f"({type(exc).__name__}: {exc}); pass a downloaded model dir") from None


def check_base(base: Path) -> dict:
    """The base must be a Qwen3.5/3.6-MoE checkpoint with weights and a tokenizer."""
    cfg_path = base / "config.json"
    if not cfg_path.exists():
        raise BuildError(f"{base}: no config.json; not a model directory")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise BuildError(f"{cfg_path}: not valid JSON ({exc.msg})") from None
    if config.get("model_type") != "qwen3_5_moe":
        raise BuildError(f"{base}: model_type {config.get('model_type')!r}; this pipeline "
                         f"builds Qwen3.5/3.6-MoE checkpoints (qwen3_5_moe)")
    if config.get("quantization_config"):
        raise BuildError(f"{base}: already quantized; start from the BF16 base")
    if not list(base.glob("*.safetensors")):
        raise BuildError(f"{base}: no *.safetensors weights")
    if not (base / "tokenizer.json").exists() and not (base / "tokenizer_config.json").exists():
        raise BuildError(f"{base}: no tokenizer files")
    try:
        read(base)  # every shard header parses
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"{base}: {exc}") from None
    return config


def gptq_ignore(layout: layouts.Layout) -> list[str]:
    """What GPTQ leaves alone: the layout's BF16 modules and lm_head (INT8 comes post hoc)."""
    return [*layout.int4_ignore, "lm_head"]


def recipe(layout: layouts.Layout):
    """The card's GPTQ recipe for the layout's INT4 group."""
    from llmcompressor.modifiers.quantization import GPTQModifier

    return GPTQModifier(ignore=gptq_ignore(layout), scheme="W4A16",
                        targets=list(layout.int4_targets), dampening_frac=layouts.DAMPENING,
                        actorder=layouts.ACTORDER)


def _weight_map(model_dir: Path) -> dict[str, str]:
    index = model_dir / INDEX
    if index.exists():
        return json.loads(index.read_text())["weight_map"]
    out = {}
    for shard in sorted(model_dir.glob("*.safetensors")):
        out.update({k: shard.name for k in read_header(shard)[0] if k != "__metadata__"})
    return out


def _write_index(model_dir: Path, weight_map: dict[str, str]) -> None:
    """The index over the final shards; shards nothing points to any more (an exporter's
    own copy of the MTP tensors, say) are removed."""
    kept = set(weight_map.values())
    for shard in model_dir.glob("*.safetensors"):
        if shard.name not in kept:
            shard.unlink()
    total = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    (model_dir / INDEX).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
        indent=2))


def copy_mtp(base: Path, out: Path, weight_map: dict[str, str]) -> int:
    """Fix-up 1: the base's BF16 `mtp.*` tensors, unchanged, into their own shard."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    base_map = _weight_map(base)
    keys = sorted(k for k in base_map if k.startswith("mtp."))
    if not keys:
        return 0
    tensors = {}
    for shard in sorted({base_map[k] for k in keys}):
        with safe_open(str(base / shard), "pt") as f:
            tensors.update({k: f.get_tensor(k) for k in keys if base_map[k] == shard})
    for k in [k for k in weight_map if k.startswith("mtp.")]:
        del weight_map[k]  # an exporter that kept some: the base's win
    save_file(tensors, str(out / MTP_SHARD), metadata={"format": "pt"})
    weight_map.update({k: MTP_SHARD for k in keys})
    return len(keys)


def int8_lm_head(out: Path, weight_map: dict[str, str]) -> None:
    """Fix-up 2: lm_head to INT8 sym group 128 (round to nearest), compressed-tensors'
    pack-quantized form (`weight_packed` int32, `weight_scale`, `weight_shape`)."""
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    from safetensors import safe_open
    from safetensors.torch import save_file

    key = next((k for k in weight_map if k.endswith("lm_head.weight")), None)
    if key is None:
        raise BuildError("export has no lm_head.weight to quantize")
    shard = out / weight_map[key]
    with safe_open(str(shard), "pt") as f:
        rest = {k: f.get_tensor(k) for k in f.keys() if k != key}
        w = f.get_tensor(key).to(torch.float32)
    rows, cols = w.shape
    g = layouts.GROUP_SIZE
    if cols % g:
        raise BuildError(f"lm_head width {cols} is not a multiple of {g}")
    groups = w.reshape(rows, cols // g, g)
    scale = groups.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.5
    scale = scale.to(torch.bfloat16).to(torch.float32)  # the stored scale is what dequantizes
    q = torch.clamp(torch.round(groups / scale), -128, 127).to(torch.int8).reshape(rows, cols)
    prefix = key[: -len("weight")]
    head = {prefix + "weight_packed": pack_to_int32(q, 8),
            prefix + "weight_scale": scale.reshape(rows, cols // g).to(torch.bfloat16),
            prefix + "weight_shape": torch.tensor([rows, cols], dtype=torch.int64)}
    # into the shard lm_head.weight came from: transformers 5.17 silently skipped a shard
    # of its own (measured: lm_head reported MISSING and left random)
    save_file({**rest, **head}, str(shard), metadata={"format": "pt"})
    del weight_map[key]
    weight_map.update({k: shard.name for k in head})


def final_config(base_config: dict, exported: dict, layout: layouts.Layout,
                 has_mtp: bool) -> dict:
    """Fix-ups 1-3 on config.json: the base's config with the export's
    quantization_config, `re:.*mtp.*` ignored, and the INT8 lm_head as group_1."""
    q = dict(exported.get("quantization_config") or layout.quantization_config())
    ignore = [i for i in q.get("ignore", []) if i != "lm_head"]
    if has_mtp and "re:.*mtp.*" not in ignore:
        ignore.append("re:.*mtp.*")
    if not layout.int8_lm_head:
        ignore.append("lm_head")
    q["ignore"] = ignore
    groups = dict(q.get("config_groups", {}))
    if layout.int8_lm_head:
        groups["group_1"] = layout.quantization_config()["config_groups"]["group_1"]
    q["config_groups"] = groups
    return {**base_config, "quantization_config": q}


def run(opts: Options) -> Path:
    stages = Stages(opts.progress)
    layout = layouts.get(opts.layout)
    select_device(opts.device)
    if not layout.quantized:
        raise BuildError("layout bf16 is the base itself; nothing to build")
    out = opts.out.resolve()
    if out.exists() and not opts.force:
        raise BuildError(f"{out} exists; pass --force to replace it")
    stages("check base")
    base = resolve_base(opts.model)
    base_config = check_base(base)
    stages.done("check base")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    (tmp / BUILDING).write_text(f"python -m build, pid {os.getpid()}, started "
                                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    try:
        info = _build(opts, base, base_config, layout, tmp, stages)
        stages("finish")
        (tmp / BUILD_INFO).write_text(json.dumps(info, indent=1, ensure_ascii=False))
        (tmp / BUILDING).unlink()
        if out.exists():  # --force: swap, then drop the old one
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
        stages.done("finish")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        stages.bar.close()
    return out


def text_dataset(texts: list[str]):
    """The calibration texts as a `datasets.Dataset` whose fingerprint is their SHA-256.
    Left to itself, datasets fingerprints a new table by pickling it with dill, which fails
    under Python 3.12 with pyarrow 26 ("Can't pickle <class 'MonthDayNano'>": found on the
    H200 host, where the build first ran on Python 3.12)."""
    import hashlib

    from datasets import Dataset
    from datasets.table import InMemoryTable

    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
    return Dataset(InMemoryTable.from_pydict({"text": texts}), fingerprint=digest)


def _build(opts: Options, base: Path, base_config: dict, layout: layouts.Layout, tmp: Path,
           stages: Stages) -> dict:
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modeling.moe.linearize import load_quantizable_moe
    from transformers import AutoTokenizer, Qwen3_5MoeForConditionalGeneration

    stages("calibration set")
    tok = AutoTokenizer.from_pretrained(base)
    dialogues = calib.load(opts.calib or calib.DIALOGUES)
    general = calib.load(opts.general or calib.GENERAL, min_records=1)
    persona = (opts.persona or calib.DATA.parent.parent / "persona" / "default.md").read_text(
        encoding="utf-8").strip()
    samples = calib.build(tok, dialogues, general, persona, opts.samples, opts.seq_len,
                          opts.seed)
    stages.done("calibration set")
    stages("load model")
    # The model stays in CPU RAM (~72 GB for the 35B base); llm-compressor's sequential
    # pipeline moves one decoder layer at a time onto the GPU for calibration and GPTQ.
    with load_quantizable_moe(Qwen3_5MoeForConditionalGeneration):
        model = Qwen3_5MoeForConditionalGeneration.from_pretrained(base, dtype=torch.bfloat16)
    stages.done("load model")
    stages("GPTQ")
    ds = text_dataset([s.text for s in samples])
    oneshot(model=model, processor=tok, dataset=ds, recipe=recipe(layout),
            max_seq_length=opts.seq_len, num_calibration_samples=len(samples),
            moe_calibrate_all_experts=True, sequential_offload_device=opts.offload_device)
    stages.done("GPTQ")
    stages("export")
    model.save_pretrained(tmp, save_compressed=True, max_shard_size="4GB")
    del model
    stages.done("export")
    stages("fix-ups")
    exported = json.loads((tmp / "config.json").read_text())
    weight_map = _weight_map(tmp)
    n_mtp = copy_mtp(base, tmp, weight_map)
    if layout.int8_lm_head:
        int8_lm_head(tmp, weight_map)
    _write_index(tmp, weight_map)
    copied = []
    for name in UPSTREAM_FILES:
        if (base / name).exists():
            shutil.copyfile(base / name, tmp / name)
            copied.append(name)
    config = final_config(base_config, exported, layout, n_mtp > 0)
    (tmp / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    stages.done("fix-ups")
    stages("inspect")
    modules, cfg = read(tmp, building_ok=True)
    problems = check(modules, cfg, layout)
    if problems:
        raise BuildError("the export is not layout " + layout.name + ":\n  " +
                         "\n  ".join(problems[:20]))
    table = summary(modules, cfg, tmp)
    print(render(table, opts.out))
    stages.done("inspect")
    import compressed_tensors
    import llmcompressor
    import transformers

    return {"layout": layout.name, "summary": layout.summary, "base": str(base),
            "calibration": {"dialogues": str(opts.calib or calib.DIALOGUES),
                            "general": str(opts.general or calib.GENERAL),
                            "samples": len(samples), "seq_len": opts.seq_len,
                            "mix": {k: sum(s.kind == k for s in samples) for k in calib.MIX},
                            "tokens": sum(s.tokens for s in samples)},
            "recipe": {"scheme": "W4A16", "targets": list(layout.int4_targets),
                       "ignore": gptq_ignore(layout), "group_size": layouts.GROUP_SIZE,
                       "symmetric": True, "actorder": layouts.ACTORDER,
                       "dampening_frac": layouts.DAMPENING,
                       "moe_calibrate_all_experts": True,
                       "lm_head": "INT8 sym g128 RTN (post hoc)" if layout.int8_lm_head
                       else "BF16"},
            "fixups": {"mtp_tensors": n_mtp, "upstream_files": copied},
            "versions": {"llmcompressor": llmcompressor.__version__,
                         "compressed_tensors": compressed_tensors.__version__,
                         "transformers": transformers.__version__,
                         "torch": torch.__version__},
            "stage_seconds": stages.times,
            "decode_bytes_per_token": table["decode_bytes_per_token"],
            "disk_bytes": table["disk_bytes"]}
