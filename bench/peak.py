"""Run a command and record its wall time and memory: host RSS of its process tree and the
GPU's used memory, sampled every `--every` seconds.

    python -m bench.peak --out run.json -- python -m build --model DIR --out OUT

Writes {"command", "exit", "seconds", "peak_rss_gib", "peak_gpu_gib", "samples": [[t, rss,
gpu], ...]} (GiB, seconds from the start), so the peaks of a stage can be read off by time
(e.g. per decoder layer, against the command's own log). GPU memory is the device's used
memory as `nvidia-smi` reports it (the whole GPU: run the command alone on it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

GIB = 2**30


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants, from /proc (Linux)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, pp in parent.items() if pp == p and c not in tree]
    total = 0
    for p in tree:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def gpu_used() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    vals = [int(x) for x in out.split() if x.strip().isdigit()]
    return sum(vals) * 2**20 if vals else None


def run(cmd: list[str], out: Path, every: float = 1.0) -> int:
    t0 = time.time()
    proc = subprocess.Popen(cmd)
    samples: list[list[float | None]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            gpu = gpu_used()
            samples.append([round(time.time() - t0, 1), round(tree_rss(proc.pid) / GIB, 2),
                            None if gpu is None else round(gpu / GIB, 2)])
            stop.wait(every)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    code = proc.wait()
    stop.set()
    th.join()
    rss = [s[1] for s in samples]
    gpu = [s[2] for s in samples if s[2] is not None]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": " ".join(cmd), "exit": code, "seconds": round(time.time() - t0, 1),
        "peak_rss_gib": max(rss, default=None), "peak_gpu_gib": max(gpu, default=None),
        "samples": samples}))
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command after --")
    sys.exit(run(cmd, args.out, args.every))


if __name__ == "__main__":
    main()
