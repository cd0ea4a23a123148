"""A tiny random Qwen3.5-MoE with Qwen3.6's structure, for tests and CPU trials.

    python -m build tiny --out DIR

Same architecture as the real model, scaled down: hybrid layers (three Gated-DeltaNet, one
gated attention), routed experts + shared expert + gates, a small vision tower, an MTP
layer (`mtp.*` tensors as the Hub checkpoint carries them), and a byte-level BPE tokenizer
trained here on the project's own bilingual text, with Qwen's special tokens at the end of
its vocabulary and the project's ChatML template. Widths are multiples of 128 so group-128
quantization applies; linear-attention head dims stay at 128 (vLLM needs 64 or 128) and
the attention head dim at 256 (the real mrope sections fill its rotary quarter).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
ROOT = DATA.parent.parent
REAL_CONFIG = DATA / "qwen3.6-35b-a3b.config.json"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
            "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
            "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
            "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<think>",
            "</think>"]
LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]


def tiny_config(vocab_size: int, specials: dict[str, int] | None = None) -> dict:
    """The real config.json with every size scaled down; token ids from `specials`."""
    cfg = copy.deepcopy(json.loads(REAL_CONFIG.read_text()))
    t = cfg["text_config"]
    t.update(hidden_size=256, num_hidden_layers=len(LAYERS), layer_types=list(LAYERS),
             num_attention_heads=2, num_key_value_heads=1, head_dim=256,
             linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=128,
             linear_value_head_dim=128, num_experts=8, num_experts_per_tok=2,
             moe_intermediate_size=128, shared_expert_intermediate_size=128,
             vocab_size=vocab_size, max_position_embeddings=4096, mtp_num_hidden_layers=1)
    v = cfg["vision_config"]
    v.update(depth=1, hidden_size=128, intermediate_size=256, num_heads=2,
             out_hidden_size=256, num_position_embeddings=256)
    if specials:
        t["bos_token_id"] = t["eos_token_id"] = specials["<|endoftext|>"]
        cfg.update(image_token_id=specials["<|image_pad|>"],
                   video_token_id=specials["<|video_pad|>"],
                   vision_start_token_id=specials["<|vision_start|>"],
                   vision_end_token_id=specials["<|vision_end|>"])
    return cfg


def corpus() -> list[str]:
    """The project's own bilingual text: persona, latency turns, calibration samples."""
    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "persona").glob("*.md"))]
    turns = json.loads((DATA / "latency_turns.json").read_text(encoding="utf-8"))
    texts += turns["turns"] + [m["content"] for m in turns["history"]]
    calib = DATA / "calib_dialogues.jsonl"
    if calib.exists():
        for line in calib.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts += [t["content"] for t in json.loads(line)["turns"]]
    return texts


def train_tokenizer(out: Path, vocab_size: int = 2048) -> dict[str, int]:
    """Byte-level BPE on `corpus()`; Qwen's special tokens appended after the merges."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from build.dryrun import CHAT_TEMPLATE, tokenizer_config

    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
               r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    template = CHAT_TEMPLATE.read_text()
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(template), indent=1))
    (out / "chat_template.jinja").write_text(template)
    return {s: tok.token_to_id(s) for s in SPECIALS}


def _mtp_tensors(text_config, seed: int) -> dict:
    """Random `mtp.*` tensors shaped as Qwen3.5-MoE checkpoints carry them: fc, the three
    norms and one full-attention MoE decoder layer (experts stored per expert)."""
    import torch
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m

    torch.manual_seed(seed)
    cfg = copy.deepcopy(text_config)
    cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    layer = m.Qwen3_5MoeDecoderLayer(cfg, layer_idx=0).to(torch.bfloat16)
    h = cfg.hidden_size
    out = {"mtp.fc.weight": torch.randn(h, 2 * h, dtype=torch.bfloat16) * 0.02}
    for n in ("norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        out[f"mtp.{n}.weight"] = torch.zeros(h, dtype=torch.bfloat16)
    for name, t in layer.state_dict().items():
        if name == "mlp.experts.gate_up_proj":  # (E, 2I, H) -> per-expert gate / up
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight"] = t[e, :inter].clone()
                out[f"mtp.layers.0.mlp.experts.{e}.up_proj.weight"] = t[e, inter:].clone()
        elif name == "mlp.experts.down_proj":
            for e in range(t.shape[0]):
                out[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"] = t[e].clone()
        else:
            out[f"mtp.layers.0.{name}"] = t.clone()
    return out


def build(out: Path, seed: int = 0) -> Path:
    """Write the tiny model (bf16 safetensors + MTP shard + index), tokenizer, configs."""
    out.mkdir(parents=True, exist_ok=True)
    specials = train_tokenizer(out)
    vocab = max(specials.values()) + 1
    vocab = (vocab + 127) // 128 * 128  # padded like the real vocabulary (248320)
    return write_model(out, tiny_config(vocab, specials), specials["<|im_end|>"],
                       specials["<|endoftext|>"], seed=seed, shard_size="200MB")


def write_model(out: Path, cfg_dict: dict, im_end: int, endoftext: int, seed: int = 0,
                shard_size: str = "200MB", init_bf16: bool = False) -> Path:
    """Random bf16 weights for `cfg_dict` (a Qwen3.5-MoE config.json) beside the tokenizer
    already in `out`: safetensors shards, the `mtp.*` shard, the index, generation and
    processor configs, as the Hub checkpoints have them. `init_bf16`: draw the weights in
    bf16 (at full width a float32 model would not fit in RAM; the tiny one keeps its
    float32 draw, so its weights stay what the tests have always used)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, Qwen3_5MoeForConditionalGeneration

    from build.dryrun import processor_configs

    (out / "config.json").write_text(json.dumps(cfg_dict, indent=1))
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    if init_bf16:
        torch.set_default_dtype(torch.bfloat16)
    try:
        model = Qwen3_5MoeForConditionalGeneration(config).to(torch.bfloat16)
        mtp = _mtp_tensors(config.text_config, seed + 1)
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():  # visible routing: untrained norms / gates at zero route nothing
        for name, p in model.named_parameters():
            if p.dim() >= 2 and ("mlp.gate" in name or "experts" in name):
                p.normal_(0, 0.05)
    model.save_pretrained(out, max_shard_size=shard_size)
    del model
    # save_pretrained rewrote config.json; the base checkpoint keeps the upstream form
    (out / "config.json").write_text(json.dumps(cfg_dict, indent=1))
    save_file(mtp, str(out / "model-mtp.safetensors"), metadata={"format": "pt"})
    index_path = out / "model.safetensors.index.json"
    if index_path.exists():
        index = json.loads(index_path.read_text())
    else:  # one shard: write the index the Hub checkpoints have
        from safetensors import safe_open

        with safe_open(str(out / "model.safetensors"), "pt") as f:
            index = {"metadata": {}, "weight_map": {k: "model.safetensors" for k in f.keys()}}
    index["weight_map"].update({k: "model-mtp.safetensors" for k in mtp})
    index_path.write_text(json.dumps(index, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [im_end, endoftext], "pad_token_id": endoftext, "do_sample": False},
        indent=1))
    for name, cfg in processor_configs(cfg_dict).items():
        (out / name).write_text(json.dumps(cfg, indent=1))
    return out
