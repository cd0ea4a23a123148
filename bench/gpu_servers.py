"""The model servers of `python -m app --launch`, started once and kept up, so that the app
runs of one GPU session (a before and an after, a capacity sweep) share one start: the
first start of both dry-run servers took 347 s on the H200, most of a 10-minute call.

    python -m bench.gpu_servers [--ready-timeout S] -- APP_FLAGS     # stays up until SIGTERM
    python -m bench.gpu_servers --wait [--ready-timeout S]           # until they answer

APP_FLAGS are the app's own (`--primary-checkpoint`, `--anchor-checkpoint`, `--vllm-arg`
...): the servers, ports and flags are exactly `--launch`'s (app/ops/launch.py). The app then
runs on them with `--base-url http://127.0.0.1:8000/v1 --model qwen36` (and the anchor's
`--anchor-base-url http://127.0.0.1:8001/v1 --anchor-model anchor`): `ENDPOINTS` below.
`bench/h200_voice.sh` uses them when they answer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import urllib.request

from app.__main__ import _interrupt, launch_servers
from app.ops.cli import parse
from app.paths import ROOT

PRIMARY, ANCHOR = "http://127.0.0.1:8000", "http://127.0.0.1:8001"
PID_FILE = ROOT / "logs" / "gpu-servers.pid"
READY = ROOT / "logs" / "gpu-servers.ready"


def endpoints(anchor: bool = True) -> list[str]:
    """The app's flags for these servers (the served names are `--launch`'s defaults)."""
    flags = ["--base-url", f"{PRIMARY}/v1", "--model", "qwen36"]
    return flags + (["--anchor-base-url", f"{ANCHOR}/v1", "--anchor-model", "anchor"]
                    if anchor else [])


def answering(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait(timeout_s: float) -> None:
    """Until the servers `main` started are all healthy (it writes READY then)."""
    deadline = time.monotonic() + timeout_s
    while not (READY.exists() and answering(PRIMARY)):
        if time.monotonic() > deadline:
            raise SystemExit(f"the servers did not answer within {timeout_s:.0f} s; see "
                             "logs/vllm-primary.log")
        time.sleep(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wait", action="store_true", help="wait until the servers answer")
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("app_args", nargs=argparse.REMAINDER, help="-- then the app's flags")
    args = ap.parse_args()
    if args.wait:
        wait(args.ready_timeout)
        return
    app_args = args.app_args[1:] if args.app_args[:1] == ["--"] else args.app_args
    servers = launch_servers(parse(["--launch", *app_args]))
    PID_FILE.parent.mkdir(parents=True, exist_ok=True)
    READY.unlink(missing_ok=True)
    PID_FILE.write_text(str(os.getpid()))  # `bash bench/h200_voice.sh stop` reads it
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        for s in servers:
            s.start()
        for s in servers:  # in this thread: a stop while they start is not held up
            s.wait_healthy(args.ready_timeout)
        READY.write_text(" ".join(endpoints(len(servers) == 2)))
        print("servers ready: " + READY.read_text(), flush=True)
        while all(s.proc.poll() is None for s in servers):
            time.sleep(5)
        print("a server exited; see logs/", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        for s in servers:
            s.stop()
        READY.unlink(missing_ok=True)
        PID_FILE.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
