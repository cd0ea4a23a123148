"""The offline vLLM bundle's packing format: split into checked parts, reassembled and
installed by `build/bundle.py unpack` (stdlib + pip, as on a bare GPU host); missing or
corrupt parts are named."""

import subprocess
import sys
import tarfile
import zipfile

import pytest

from build.bundle import write_parts
from tests.conftest import ROOT


def make_wheel(path) -> None:  # noqa: ANN001
    """A minimal real wheel: one module, dist-info with METADATA, WHEEL and RECORD."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tinydep/__init__.py", "VALUE = 42\n")
        info = "tinydep-1.0.dist-info"
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n")
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


def unpack(src, target):  # noqa: ANN001, ANN201
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
