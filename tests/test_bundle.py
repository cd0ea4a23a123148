"""The offline vLLM bundle's packing format: split into checked parts, reassembled and
installed by `build/bundle.py unpack` (stdlib + pip, as on a bare GPU host); missing or
corrupt parts are named."""

import subprocess
import sys
import tarfile
import zipfile

import pytest

from build.bundle import resolve, write_parts
from tests.conftest import ROOT


def make_wheel(path, name: str = "tinydep", requires: tuple[str, ...] = ()) -> None:
    """A minimal real wheel: one module, dist-info with METADATA, WHEEL and RECORD."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        info = f"{name}-1.0.dist-info"
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" +
                   "".join(f"Requires-Dist: {r}\n" for r in requires))
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                   "Root-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


@pytest.fixture
def bundle(tmp_path):
    payload = tmp_path / "payload"
    (payload / "fakevllm").mkdir(parents=True)
    (payload / "fakevllm" / "__init__.py").write_text("__version__ = '0.24.0'\n")
    (payload / "fakevllm" / "kernel.so").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    (payload / "fakevllm" / "kernel.so").chmod(0o755)
    wheel = tmp_path / "tinydep-1.0-py3-none-any.whl"
    make_wheel(wheel)
    blob = tmp_path / "payload.tar.xz"
    with tarfile.open(blob, "w:xz", preset=0) as tar:
        tar.add(payload, arcname=".")
        tar.add(wheel, arcname=f"_wheels/{wheel.name}")
    out = tmp_path / "bundle"
    out.mkdir()
    write_parts(blob, out, 1, {"vllm": "0.24.0"})
    return out


def unpack(src, target):
    return subprocess.run([sys.executable, str(ROOT / "build" / "bundle.py"), "unpack",
                           str(src), "--target", str(target)], capture_output=True, text=True,
                          timeout=300)


def test_parts_reassemble_and_install(bundle, tmp_path):
    parts = sorted(p.name for p in bundle.glob("part*"))
    assert len(parts) >= 1 and all((bundle / p).stat().st_size <= 1 << 20 for p in parts)
    site = tmp_path / "site"
    proc = unpack(bundle, site)
    assert proc.returncode == 0, proc.stderr
    assert (site / "fakevllm" / "kernel.so").stat().st_mode & 0o111  # still executable
    check = subprocess.run([sys.executable, "-c", "import fakevllm, tinydep; "
                            "print(fakevllm.__version__, tinydep.VALUE)"],
                           env={"PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert check.stdout.split() == ["0.24.0", "42"]
    assert not (site / "_wheels").exists()


def test_missing_or_corrupt_part_is_named(bundle, tmp_path):
    part = sorted(bundle.glob("part*"))[0]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    proc = unpack(bundle, tmp_path / "a")
    assert proc.returncode != 0 and f"{part.name} is corrupt" in proc.stderr
    part.unlink()
    proc = unpack(bundle, tmp_path / "b")
    assert proc.returncode != 0 and f"{part.name} missing" in proc.stderr
    assert not (tmp_path / "b").exists()


def test_a_package_met_again_with_an_extra_brings_that_extras_needs(tmp_path, monkeypatch):
    """vLLM reaches pydantic-extra-types plain, then as [pycountry] through mistral_common:
    pycountry must come along (it did not, and the vision tower failed to load on the H200).
    Real pip, from a local folder of wheels."""
    index = tmp_path / "index"
    index.mkdir()
    wheels = {"rootpkg": ("plainuser", "extrauser", "hostpkg"),
              "plainuser": ("extratypes",), "extrauser": ("extratypes[country]",),
              "extratypes": ('country; extra == "country"',), "country": (),
              "hostpkg": ()}
    for name, requires in wheels.items():
        make_wheel(index / f"{name}-1.0-py3-none-any.whl", name, requires)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    got = resolve(index / "rootpkg-1.0-py3-none-any.whl", {"hostpkg"}, tmp_path / "dest",
                  "3.12")
    assert sorted(w.name.split("-")[0] for w in got) == [
        "country", "extratypes", "extrauser", "plainuser"]
