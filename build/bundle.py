"""A slim offline bundle of vLLM for an air-gapped GPU host.

    python -m build bundle pack --out DIR            # here, with PyPI: wheels -> parts
    python3 build/bundle.py unpack DIR --target SITE # there, stdlib + pip only
    python3 build/bundle.py join DIR FILE            # there: check the parts, join them

`pack` downloads the pinned vLLM wheel and every dependency the GPU host lacks (a list of
what it has, `--have`), drops what the target GPU does not need (`--slim hopper`: FA2,
the vllm-rs binary, DeepGEMM headers, SM100 FMHA), compresses it and splits everything
into parts of at most `--part-mib` MiB with a manifest of SHA-256 sums, so it can travel
in small pieces. `unpack` checks every part, reassembles them and installs into a folder
for PYTHONPATH; it refuses a bundle with a missing or corrupt part, naming it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# Packages of the GPU wheel vLLM names that the text-only serving path here never imports,
# or that the GPU host already has in the version vLLM was built for.
NOT_CARRIED = (
    "torch torchaudio torchvision triton numba flashinfer-python flashinfer-cubin "
    "tilelang nvidia-cudnn-frontend fastsafetensors nvidia-cutlass-dsl "
    "quack-kernels tokenspeed-mla humming-kernels"
).split()
# vLLM 0.24 pins apache-tvm-ffi==0.1.9 for flashinfer (not carried); the xgrammar it
# imports at engine start needs >= 0.1.11 (measured on the H200: 0.1.9 fails to load it).
OVERRIDES = {"apache-tvm-ffi": ">=0.1.11"}
SLIM = {
    "none": [],
    # Hopper (H100/H200) runs FA3; these are for other GPUs or other entry points.
    "hopper": ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs",
               "vllm/third_party/deep_gemm/include",
               "vllm/third_party/fmha_sm100"],
}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64"]
MANIFEST = "manifest.json"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(wheel: Path) -> list:
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    return [Requirement(x.split(":", 1)[1].strip())
            for x in lines if x.startswith("Requires-Dist:")]


def _wanted(req, extras, python: str) -> bool:
    if req.marker is None:
        return True
    env = {"python_version": python, "python_full_version": python + ".0",
           "platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux",
           "os_name": "posix", "implementation_name": "cpython",
           "platform_python_implementation": "CPython"}
    return any(req.marker.evaluate(dict(env, extra=e)) for e in ("", *extras))


def _download(spec: str, dest: Path, python: str) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest), spec]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    out = subprocess.run(cmd, capture_output=True, text=True)
    found = re.findall(r"(?:Saved|File was already downloaded) (\S+\.whl)", out.stdout)
    if out.returncode or not found:
        pure = _pure_wheel(spec, dest)
        if pure is None:
            raise SystemExit(f"pip could not fetch {spec} for Python {python}:\n"
                             f"{out.stderr[-800:]}")
        return pure
    return Path(found[-1])


def _pure_wheel(spec: str, dest: Path) -> Path | None:
    """A package published as source only (jieba): its wheel built here, kept only where it
    is pure Python (`none-any`), which any Python 3 installs as it is."""
    with tempfile.TemporaryDirectory() as tmp:
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                                "--no-binary", ":all:", "-w", tmp, spec],
                               capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*-none-any.whl"))
        if built.returncode or len(wheels) != 1:
            return None
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.move(wheels[0], dest / wheels[0].name))


def read_have(path: str | Path) -> set[str]:
    """The packages a list names (commas or whitespace between names, `#` comments),
    canonical: what the GPU host already has."""
    text = "\n".join(line.split("#", 1)[0] for line in Path(path).read_text().splitlines())
    return {_canon(x) for x in re.split(r"[,\s]+", text) if x}


def resolve(root: Path | list, have: set[str], dest: Path, python: str) -> list[Path]:
    """Every wheel `root` (a wheel, or a list of requirements) needs that the host lacks,
    by walking Requires-Dist. A package met
    again with extras it was not yet walked for has those extras' requirements walked too
    (vLLM 0.24 reaches pydantic-extra-types plain first and later as
    `pydantic-extra-types[pycountry]`, through mistral_common: without pycountry, serving
    with the vision tower failed on the H200)."""
    skip = {_canon(n) for n in NOT_CARRIED} | have
    roots = _requirements(root) if isinstance(root, Path) else list(root)
    queue = [r for r in roots if _wanted(r, (), python)]
    walked: dict[str, tuple[Path, set[str]]] = {}
    while queue:
        req = queue.pop(0)
        name = _canon(req.name)
        if name in skip:
            continue
        if name in walked:
            whl, extras = walked[name]
            new = set(req.extras) - extras
            if not new:
                continue
            extras |= new
        else:
            whl = _download(f"{req.name}{OVERRIDES.get(name, req.specifier)}", dest, python)
            walked[name] = whl, set(req.extras)
            new = set(req.extras)
        queue += [r for r in _requirements(whl) if _wanted(r, tuple(new), python)]
    return [whl for whl, _ in walked.values()]


def write_parts(blob: Path, out: Path, part_mib: int, info: dict, prefix: str = "part") -> None:
    """Split `blob` into parts of at most `part_mib` MiB with a manifest of SHA-256 sums."""
    parts, size, whole = [], part_mib << 20, hashlib.sha256()
    with open(blob, "rb") as f:
        for i, chunk in enumerate(iter(lambda: f.read(size), b"")):
            name = f"{prefix}{i:02d}"
            (out / name).write_bytes(chunk)
            whole.update(chunk)
            parts.append({"name": name, "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {**info, "sha256": whole.hexdigest(), "parts": parts}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))


def pack(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bundle-", dir=out))
    try:
        vllm = _download(f"vllm=={args.vllm}", work / "root", args.python)
        have = read_have(args.have) if args.have else set()
        deps = resolve(vllm, have, work / "deps", args.python)
        mib = sum(p.stat().st_size for p in deps) / 2**20
        print(f"{len(deps)} dependency wheels, {mib:.1f} MiB")
        tree = work / "tree"
        with zipfile.ZipFile(vllm) as z:
            z.extractall(tree)
        for rel in SLIM[args.slim]:
            p = tree / rel
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        # keep the file modes (the .so files must stay executable) by tarring the tree
        blob = work / "payload.tar.xz"
        with tarfile.open(blob, "w:xz", preset=args.xz_preset) as tar:
            tar.add(tree, arcname=".")
            for whl in deps:
                tar.add(whl, arcname=f"_wheels/{whl.name}")
        write_parts(blob, out, args.part_mib, {"vllm": args.vllm, "python": args.python,
                                               "slim": args.slim,
                                               "wheels": [w.name for w in deps]})
        parts = json.loads((out / MANIFEST).read_text())["parts"]
        print(f"{len(parts)} parts of <= {args.part_mib} MiB in {out} "
              f"({blob.stat().st_size / 2**20:.1f} MiB)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def join(src: Path, dest: Path) -> dict:
    """Check every part in `src` against its manifest and write them, joined, to `dest`;
    a missing or corrupt part is named. Returns the manifest."""
    manifest = json.loads((src / MANIFEST).read_text())
    missing = [p["name"] for p in manifest["parts"] if not (src / p["name"]).exists()]
    if missing:
        raise SystemExit(f"bundle incomplete: {', '.join(missing)} missing in {src}")
    h = hashlib.sha256()
    with open(dest, "wb") as out:
        for p in manifest["parts"]:
            data = (src / p["name"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != p["sha256"]:
                out.close()
                dest.unlink()
                raise SystemExit(f"bundle part {p['name']} is corrupt (SHA-256 mismatch)")
            h.update(data)
            out.write(data)
    if h.hexdigest() != manifest["sha256"]:
        dest.unlink()
        raise SystemExit("bundle parts do not reassemble to the packed payload")
    return manifest


def unpack(args) -> None:
    src, target = Path(args.src), Path(args.target)
    blob = Path(tempfile.mkdtemp()) / "payload.tar.xz"
    manifest = join(src, blob)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(blob, "r:xz") as tar:
        tar.extractall(target, filter="fully_trusted")
    wheels = sorted((target / "_wheels").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--no-compile", "--no-cache-dir", "--upgrade", "--target",
                        str(target), *map(str, wheels)], check=True)
    shutil.rmtree(target / "_wheels", ignore_errors=True)
    blob.unlink()
    print(f"vLLM {manifest.get('vllm', '?')} unpacked into {target}: export PYTHONPATH={target}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m build bundle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="download, slim, compress and split")
    p.add_argument("--out", required=True)
    p.add_argument("--vllm", default="0.24.0")
    p.add_argument("--python", default="3.12", help="the GPU host's Python")
    p.add_argument("--have", help="file listing packages the GPU host already has")
    p.add_argument("--slim", choices=sorted(SLIM), default="none")
    p.add_argument("--part-mib", type=int, default=48)
    p.add_argument("--xz-preset", type=int, default=6)
    u = sub.add_parser("unpack", help="verify, reassemble, install into --target")
    u.add_argument("src")
    u.add_argument("--target", required=True)
    j = sub.add_parser("join", help="verify the parts, write them joined to FILE")
    j.add_argument("src")
    j.add_argument("dest")
    args = ap.parse_args(argv)
    if args.cmd == "join":
        join(Path(args.src), Path(args.dest))
        return
    {"pack": pack, "unpack": unpack}[args.cmd](args)


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    main()
