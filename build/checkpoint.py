"""What a checkpoint holds, module group by module group, and whether it is a given layout.

    python -m build inspect DIR [--layout lowlat] [--json]

Reads only safetensors headers and the few bytes of each `weight_shape` (stdlib; runs in
any environment, on a 70 GB checkpoint in a second). Prints every module group with its
precision, group size and bytes, the size on disk, and the bytes one decode step reads per
token (everything but the vision tower, the MTP head and the embedding table; one row of
that; routed experts scaled by top-k / experts). With a layout (given, or recorded in
BUILD.json by `python -m build`) it checks every Linear module and the
`quantization_config`, and exits 1 on any mismatch.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from build import layouts

BUILDING = "BUILDING"  # present while `python -m build` writes; never in a finished dir
BUILD_INFO = "BUILD.json"
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8, "I8": 1, "U8": 1,
               "F8_E4M3": 1, "BOOL": 1}
SUFFIXES = ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point",
            "weight_g_idx", "weight", "bias")
GROUPS = [  # (label, pattern on the module name); first match wins
    ("MTP head", r"^mtp\."),
    ("vision tower", r"(^|\.)visual\."),
    ("lm_head", r"(^|\.)lm_head$"),
    ("embeddings", r"embed_tokens$"),
    ("routed experts", r"\.mlp\.experts(\.\d+\.(gate|up|down)_proj|\.gate_up_proj|\.down_proj)$"),
    ("shared_expert_gate", r"\.shared_expert_gate$"),
    ("shared expert", r"\.shared_expert\.(gate|up|down)_proj$"),
    ("router (mlp.gate)", r"\.mlp\.gate$"),
    ("GDN in_proj_a / in_proj_b", r"\.linear_attn\.in_proj_[ab]$"),
    ("GDN in_proj_qkv / in_proj_z / out_proj", r"\.linear_attn\.(in_proj_qkv|in_proj_z|out_proj)$"),
    ("attention q / k / v / o", r"\.self_attn\.[qkvo]_proj$"),
]
LINEAR_GROUPS = {"lm_head", "routed experts", "shared_expert_gate", "shared expert",
                 "GDN in_proj_a / in_proj_b", "GDN in_proj_qkv / in_proj_z / out_proj",
                 "attention q / k / v / o"}


class InspectError(RuntimeError):
    pass


@dataclass
class Module:
    name: str
    group: str
    tensors: dict = field(default_factory=dict)  # suffix -> (dtype, shape, nbytes)
    precision: str = "bf16"
    group_size: int | None = None
    nbytes: int = 0


def read_header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def _read_ints(path: Path, base: int, info: dict) -> list[int]:
    start, end = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(base + start)
        raw = f.read(end - start)
    fmt = {"I64": "q", "I32": "i"}[info["dtype"]]
    return list(struct.unpack("<" + fmt * (len(raw) // struct.calcsize(fmt)), raw))


def group_of(name: str) -> str:
    for label, pattern in GROUPS:
        if re.search(pattern, name):
            return label
    return "norms, conv1d, other"


def read(model_dir: Path, building_ok: bool = False) -> tuple[dict[str, Module], dict]:
    """Every module of the checkpoint; `building_ok`: the build inspecting its own output."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InspectError(f"{model_dir}: not a directory")
    if (model_dir / BUILDING).exists() and not building_ok:
        raise InspectError(f"{model_dir}: an unfinished build (the {BUILDING} marker is there)")
    cfg_path = model_dir / "config.json"
    if not cfg_path.exists():
        raise InspectError(f"{model_dir}: no config.json")
    config = json.loads(cfg_path.read_text())
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise InspectError(f"{model_dir}: no *.safetensors files")
    modules: dict[str, Module] = {}
    for path in files:
        try:
            entries, base = read_header(path)
        except (OSError, ValueError, struct.error) as exc:
            raise InspectError(f"{path.name}: unreadable safetensors header ({exc})") from None
        for key, info in entries.items():
            if key == "__metadata__":
                continue
            mod, _, suffix = key.rpartition(".")
            if suffix not in SUFFIXES:
                mod, suffix = key, "param"
            m = modules.setdefault(mod, Module(mod, group_of(mod)))
            nbytes = info["data_offsets"][1] - info["data_offsets"][0]
            m.tensors[suffix] = (info["dtype"], info["shape"], nbytes)
            m.nbytes += nbytes
            if suffix == "weight_shape":
                m.tensors["_shape"] = _read_ints(path, base, info)
    for m in modules.values():
        _classify(m)
    return modules, config


def _classify(m: Module) -> None:
    t = m.tensors
    if "weight_packed" in t:
        shape = t.get("_shape") or []
        packed = t["weight_packed"][1]
        if len(shape) != 2 or shape[1] == 0:
            m.precision = "packed (no weight_shape)"
            return
        bits = packed[-1] * 32 // shape[1]
        m.precision = {4: layouts.INT4, 8: layouts.INT8}.get(bits, f"int{bits}")
        if "weight_scale" in t:
            m.group_size = shape[1] // max(1, t["weight_scale"][1][-1])
    elif "weight" in t:
        dtype = t["weight"][0]
        m.precision = {"BF16": layouts.BF16, "I8": layouts.INT8}.get(dtype, dtype.lower())


def check(modules: dict[str, Module], config: dict, layout: layouts.Layout) -> list[str]:
    """Every way the checkpoint differs from the layout (empty: it is the layout)."""
    bad = []
    for m in sorted(modules.values(), key=lambda m: m.name):
        weight = m.tensors.get("weight")
        if "weight_packed" not in m.tensors and not (weight and len(weight[1]) >= 2):
            continue  # norms, biases, A_log, dt_bias: no matrix to quantize
        if m.group not in LINEAR_GROUPS:
            want = layouts.BF16  # vision, MTP, router, embeddings, conv1d
        elif m.group == "routed experts" and weight and len(weight[1]) == 3:
            want = layout.precision(m.name + ".0.gate_proj")  # fused 3-D experts
        else:
            want = layout.precision(m.name)
        if m.precision != want:
            bad.append(f"{m.name}: {m.precision}, layout {layout.name} wants {want}")
        elif want != layouts.BF16 and m.group_size != layouts.GROUP_SIZE:
            bad.append(f"{m.name}: group size {m.group_size}, wants {layouts.GROUP_SIZE}")
    bad += _check_config(config, layout, any(g.group == "MTP head" for g in modules.values()))
    return bad


def _check_config(config: dict, layout: layouts.Layout, has_mtp: bool) -> list[str]:
    q = config.get("quantization_config")
    if not layout.quantized:  # bf16: no INT4 group, so no INT8 head either
        return ["config.json: quantization_config present, layout bf16 has none"] if q else []
    if not q:
        return ["config.json: no quantization_config"]
    bad = []
    groups = list((q.get("config_groups") or {}).values())
    int4 = [g for g in groups if (g.get("weights") or {}).get("num_bits") == 4]
    int8 = [g for g in groups if (g.get("weights") or {}).get("num_bits") == 8]
    if layout.quantized and not int4:
        bad.append("quantization_config: no INT4 group")
    for g in int4 + int8:
        w = g["weights"]
        if w.get("group_size") != layouts.GROUP_SIZE or not w.get("symmetric"):
            bad.append(f"quantization_config group {g.get('targets')}: wants sym group 128")
    if layout.int8_lm_head and not any(layouts.LM_HEAD in g.get("targets", []) for g in int8):
        bad.append(f"quantization_config: no INT8 group targeting {layouts.LM_HEAD}")
    if has_mtp and "re:.*mtp.*" not in q.get("ignore", []):
        bad.append("quantization_config.ignore: re:.*mtp.* missing (vLLM's drafter would "
                   "expect packed MTP weights)")
    return bad


def summary(modules: dict[str, Module], config: dict, model_dir: Path) -> dict:
    text = config.get("text_config", config)
    k, e = text.get("num_experts_per_tok", 1), text.get("num_experts", 1)
    hidden = text.get("hidden_size", 0)
    rows = defaultdict(lambda: {"modules": 0, "bytes": 0, "precision": set(), "group": set()})
    decode = 0.0
    for m in modules.values():
        r = rows[m.group]
        r["modules"] += 1
        r["bytes"] += m.nbytes
        r["precision"].add(m.precision)
        if m.group_size:
            r["group"].add(m.group_size)
        if m.group in ("MTP head", "vision tower"):
            continue
        if m.group == "embeddings":
            decode += hidden * 2
        elif m.group == "routed experts":
            decode += m.nbytes * k / e
        else:
            decode += m.nbytes
    disk = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))
    table = [{"group": g, "modules": r["modules"], "precision": "/".join(sorted(r["precision"])),
              "group_size": "/".join(map(str, sorted(r["group"]))) or "-",
              "bytes": r["bytes"]} for g, r in rows.items()]
    order = [label for label, _ in GROUPS] + ["norms, conv1d, other"]
    table.sort(key=lambda r: order.index(r["group"]))
    return {"groups": table, "disk_bytes": disk, "decode_bytes_per_token": int(decode)}


def _human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def render(info: dict, model_dir: Path) -> str:
    lines = [f"{model_dir}", "", "| module group | modules | precision | group | bytes |",
             "|---|---|---|---|---|"]
    for r in info["groups"]:
        lines.append(f"| {r['group']} | {r['modules']} | {r['precision']} | {r['group_size']} "
                     f"| {_human(r['bytes'])} |")
    lines += ["", f"on disk: {info['disk_bytes'] / 2**30:.3f} GiB; one decode step reads "
              f"{_human(info['decode_bytes_per_token'])} of weights per token"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m build inspect", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--layout", default=None, help=f"one of {', '.join(layouts.LAYOUTS)}")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        modules, config = read(args.dir)
    except InspectError as exc:
        print(f"inspect: {exc}", file=sys.stderr)
        return 2
    info = summary(modules, config, args.dir)
    name = args.layout
    if name is None and (args.dir / BUILD_INFO).exists():
        name = json.loads((args.dir / BUILD_INFO).read_text()).get("layout")
    problems = check(modules, config, layouts.get(name)) if name else []
    if args.json:
        print(json.dumps({**info, "layout": name, "mismatches": problems}, indent=1))
    else:
        print(render(info, args.dir))
        if name:
            print(f"layout {name}: " + ("matches" if not problems else
                                        f"{len(problems)} mismatch(es)"))
            for p in problems[:30]:
                print(f"  - {p}")
    return 1 if problems else 0
