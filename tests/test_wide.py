"""The full-width base for GPU build trials (`python -m build wide`): the real model but for
its depth. Its weights are 11 GB at 4 layers, so only the config is checked here; the
builds on it are recorded in docs/PERFORMANCE.md."""

import json

import pytest

from build.dryrun import REAL_CONFIG
from build.wide import wide_config


def test_everything_but_the_depth_is_the_real_model():
    real = json.loads(REAL_CONFIG.read_text())
    cfg = wide_config(4)
    t, r = cfg["text_config"], real["text_config"]
    assert t["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert t["num_hidden_layers"] == 4
    assert {k: v for k, v in t.items() if k not in ("layer_types", "num_hidden_layers")} == \
        {k: v for k, v in r.items() if k not in ("layer_types", "num_hidden_layers")}
    assert cfg["vision_config"] == real["vision_config"]
    assert (t["hidden_size"], t["num_experts"], t["moe_intermediate_size"],
            t["vocab_size"], t["mtp_num_hidden_layers"]) == (2048, 256, 512, 248320, 1)


def test_at_least_one_layer():
    with pytest.raises(ValueError, match="at least 1"):
        wide_config(0)
