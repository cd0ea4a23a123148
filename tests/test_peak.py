"""bench.peak: a command's exit status, wall time and peak host memory (its process tree)."""

import json
import subprocess
import sys

ALLOC = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"])
time.sleep(0.2)
child.wait()
sys.exit(3)
"""


def test_peak_counts_the_childs_memory_and_keeps_the_exit_status(tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "bench.peak", "--out", str(out), "--every",
                           "0.1", "--", sys.executable, "-c", ALLOC], timeout=60)
    rec = json.loads(out.read_text())
    assert proc.returncode == 3 and rec["exit"] == 3
    # the 200 MiB live in a grandchild: only a walk of the whole tree sees them
    assert 0.19 < rec["peak_rss_gib"] < 1.0
    assert rec["seconds"] >= 1.5 and len(rec["samples"]) >= 5
