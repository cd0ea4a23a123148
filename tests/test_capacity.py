"""bench.capacity's own parts (the sweep itself runs on the app: docs/PERFORMANCE.md)."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.capacity import CpuSampler

BUSY = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def test_cores_are_counted_by_kind_of_process_and_a_spawned_one_by_its_parent():
    """A model server's engine is a spawned process whose command line says nothing of
    vLLM: it counts as its parent's kind."""
    server = [sys.executable, "-c", "# vllm serve\nimport subprocess, sys\n"
              f"subprocess.run([sys.executable, '-c', {BUSY.format(s=2.5)!r}])"]
    with CpuSampler() as cpu:
        proc = subprocess.Popen(server)
        proc.wait(timeout=30)
        time.sleep(1.2)  # one more sample after it ended
    used = cpu.cores()
    assert used is not None and cpu.seconds >= 2
    assert used["model server"] > 0.4  # a whole core for most of the sampled time
    assert used["app"] == used["balancer"] == 0.0
