"""`python -m app --workers N`: N app processes behind HAProxy, on the one public port.

One app process serves a conversation's whole chain (VAD, ASR, the model's stream, TTS, the
socket) under one interpreter lock; on a GPU host, past a few conversations the turns wait
for that process, not for the GPU (docs/PERFORMANCE.md, capacity). Workers are whole apps,
each on its own loopback port with its own models, slots and records; HAProxy (Debian's
`haproxy`, an existing balancer: nothing here forwards a byte) listens where the app would,
terminates HTTPS when asked, and keeps each browser or script on the worker that holds its
session: a cookie it inserts on the first answer (the page's fetches, Gradio's stream and
the audio WebSocket all carry it), new visitors to the worker with the fewest open
connections. Each worker checks `--auth` itself, so every route stays behind it.

This process starts the model servers (`--demo`, `--launch`) once, the workers with the
same flags and their endpoints, then HAProxy; it restarts a worker that dies (its
conversations are lost, the others go on) and stops everything on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.ops.launch import ROOT, free_port, stop_group, wait_http

log = logging.getLogger(__name__)
COOKIE = "vaworker"


def split_slots(max_sessions: int, workers: int) -> list[int]:
    """`--max-sessions` over the workers (0: no limit anywhere). Every worker needs one
    slot at least: 0 would mean unlimited there."""
    if not max_sessions:
        return [0] * workers
    if max_sessions < workers:
        raise SystemExit(f"--max-sessions {max_sessions} is fewer than --workers {workers}: "
                         "each worker needs one slot at least.")
    return [max_sessions // workers + (i < max_sessions % workers) for i in range(workers)]


def split_cpus(cpus: tuple[int, ...], workers: int) -> list[tuple[int, ...]]:
    """Disjoint cores per worker when there are enough (each process sizes its thread pools
    to the cores it sees: N workers on all of them would oversubscribe them N times);
    otherwise all of them for every worker."""
    if len(cpus) < workers:
        return [cpus] * workers
    return [cpus[i::workers] for i in range(workers)]


def worker_argv(argv: list[str], port: int, slots: int, cpus: tuple[int, ...],
                endpoints: dict[str, str]) -> list[str]:
    """A worker's flags: the user's, then (last, so they win) `--worker` (it starts no model
    server: `--demo` there means the demo's settings only), its loopback port, slots, cores
    and the model servers this process started."""
    extra = ["--worker", "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
             "--max-sessions", str(slots), "--ssl-certfile", "", "--ssl-keyfile", ""]
    if cpus:
        text = ",".join(map(str, cpus))
        extra += ["--cpus", text]  # its ASR is the parent's (app/stages/asrhost.py)
    for flag, value in endpoints.items():
        extra += [flag, value]
    return [*argv, *extra]


def haproxy_config(host: str, port: int, workers: list[int], pem: Path | None = None) -> str:
    """The balancer: sticky by cookie, fewest connections for a new visitor, long timeouts
    for the page's stream and the audio WebSocket (a conversation may be quiet a while)."""
    bind = f"{'[' + host + ']' if ':' in host else host}:{port}"
    lines = [
        "global", "    maxconn 4096",
        "defaults", "    mode http", "    option dontlognull",
        "    timeout connect 5s", "    timeout client 1h", "    timeout server 1h",
        "    timeout tunnel 1h", "    timeout http-request 30s",
        "frontend voice",
        f"    bind {bind}" + (f" ssl crt {pem}" if pem else ""),
        # each worker has its own figures: Prometheus scrapes /workers/N/metrics, N = 1..
        '    http-request return status 404 content-type text/plain string "This app runs '
        f'{len(workers)} workers: scrape /workers/1/metrics .. /workers/{len(workers)}/metrics'
        '" if { path /metrics }',
    ]
    lines += [f"    use_backend metrics{i} if {{ path /workers/{i}/metrics }}"
              for i in range(1, len(workers) + 1)]
    lines += ["    default_backend workers",
              "backend workers", "    balance leastconn",
              f"    cookie {COOKIE} insert indirect nocache httponly"]
    lines += [f"    server w{i} 127.0.0.1:{p} cookie w{i} check inter 2s"
              for i, p in enumerate(workers, 1)]
    for i, p in enumerate(workers, 1):
        lines += [f"backend metrics{i}", "    http-request set-path /metrics",
                  f"    server w{i} 127.0.0.1:{p}"]
    return "\n".join(lines) + "\n"


def haproxy_binary() -> str:
    """`VOICE_AGENT_HAPROXY` (a binary carried to a host without a package manager), else
    the system's."""
    found = os.environ.get("VOICE_AGENT_HAPROXY") or shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/sbin/haproxy") if Path(p).exists()), None)
    if found is None or not Path(found).exists():
        raise SystemExit("--workers needs HAProxy (`apt-get install haproxy`, or `make "
                         "system`; or VOICE_AGENT_HAPROXY=/path/to/haproxy).")
    return found


@dataclass
class Workers:
    """The worker processes and the balancer in front of them."""

    argv: list[str]
    count: int
    host: str
    port: int
    max_sessions: int = 0
    cpus: tuple[int, ...] = ()
    endpoints: dict[str, str] = field(default_factory=dict)
    auth: tuple[str, str] | None = None
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    logs: Path = ROOT / "logs"
    ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    balancer: subprocess.Popen | None = None
    _dir: tempfile.TemporaryDirectory | None = None

    def __post_init__(self) -> None:
        self.slots = split_slots(self.max_sessions, self.count)
        self.cores = split_cpus(self.cpus or tuple(sorted(os.sched_getaffinity(0))), self.count)

    def argv_of(self, i: int) -> list[str]:
        return worker_argv(self.argv, self.ports[i], self.slots[i], self.cores[i],
                           self.endpoints)

    def log_of(self, i: int) -> Path:
        return self.logs / f"app-worker-{i + 1}.log"

    def _spawn(self, i: int) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen([sys.executable, "-m", "app", *self.argv_of(i)], cwd=ROOT,
                                stdout=open(self.log_of(i), "ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start(self, timeout_s: float = 600.0) -> Workers:
        haproxy = haproxy_binary()
        self.ports = [free_port() for _ in range(self.count)]
        self.procs = [self._spawn(i) for i in range(self.count)]
        for i in range(self.count):
            print(f"Worker {i + 1}/{self.count}: 127.0.0.1:{self.ports[i]}, cores "
                  f"{','.join(map(str, self.cores[i]))}, "
                  f"{self.slots[i] or 'unlimited'} conversations (log: {self.log_of(i)})",
                  flush=True)
        for i in range(self.count):
            self.wait_ready(i, timeout_s)
        self._dir = tempfile.TemporaryDirectory(prefix="voice-agent-haproxy-")
        folder = Path(self._dir.name)
        pem = None
        if self.ssl_certfile:  # HAProxy wants the certificate and its key in one file
            pem = folder / "site.pem"
            pem.touch(mode=0o600)
            pem.write_text(Path(self.ssl_certfile).read_text() + "\n" + (
                Path(self.ssl_keyfile).read_text() if self.ssl_keyfile else ""))
        cfg = folder / "haproxy.cfg"
        cfg.write_text(haproxy_config(self.host, self.port, self.ports, pem))
        check = subprocess.run([haproxy, "-c", "-q", "-f", str(cfg)], capture_output=True,
                               text=True)
        if check.returncode:
            raise RuntimeError(f"HAProxy refused its configuration: {check.stderr.strip()}")
        self.balancer = subprocess.Popen([haproxy, "-db", "-f", str(cfg)],
                                         stdout=open(self.logs / "haproxy.log", "ab"),
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, i: int, timeout_s: float) -> None:
        wait_http(f"http://127.0.0.1:{self.ports[i]}/agent/health", self.procs[i], timeout_s,
                  lambda: f"worker {i + 1} exited:\n" +
                  self.log_of(i).read_text(errors="replace")[-3000:],
                  f"worker {i + 1} is not up after {timeout_s:.0f} s; see {self.log_of(i)}",
                  interval_s=0.5, auth=self.auth)

    def supervise(self, poll_s: float = 1.0) -> None:
        """Until interrupted: a worker that exits is started again on its port; the
        balancer's exit ends the app."""
        while True:
            time.sleep(poll_s)
            if self.balancer is not None and self.balancer.poll() is not None:
                raise RuntimeError(f"HAProxy exited ({self.balancer.returncode}); see "
                                   f"{self.logs / 'haproxy.log'}")
            for i, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    log.warning("worker %d exited with %s; starting it again (its "
                                "conversations are lost)", i + 1, proc.returncode)
                    self.procs[i] = self._spawn(i)

    def stop(self) -> None:
        stop_group(self.balancer)
        for proc in self.procs:
            stop_group(proc)
        if self._dir is not None:
            self._dir.cleanup()
