"""The checkout as an installed package (`make setup` installs it editable): the app and the
benchmarks run as modules from any directory, and the build verbs' package is not put on
every path (an installed top-level `build` would shadow PyPA's `build`)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("module", ["app", "bench.voice_to_voice", "bench.voice_turns",
                                    "bench.asr", "bench.asr_batch", "bench.ab", "bench.capacity",
                                    "bench.page_cost", "bench.blas_threads",
                                    "bench.asr_alignment"])
def test_modules_run_from_any_directory(module, tmp_path):
    out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:"), out.stdout[:500]


def test_the_build_package_is_not_installed(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                          "s = u.find_spec('build'); print(s.origin if s else None)"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert str(ROOT / "build") not in out.stdout
