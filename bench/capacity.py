"""How many conversations one app serves: N callers at once, each its own session talking
through the app's audio channel, for each N of a sweep, against one running app.

  .venv/bin/python -m bench.capacity --sessions 1,2,4 --turns 3 --out docs/bench/capacity \\
      -- --demo --no-ab                         # the 2-core default, small N
  python -m bench.capacity --sessions 1,8,16,32 --turns 5 --out OUT -- \\
      --launch --primary-checkpoint DRY_LOWLAT ...     # a GPU host's sweep
  ... --setting workers4='--workers 4' -- ...          # and again with 4 app processes

The app is started once as a user starts it (`python -m app ARGS`) and stays up for the
whole sweep. Each caller is an `app.web.client.VoiceClient` in a thread: it starts after a
random 0-2 s, says `--turns` clips (the recorded English questions and piper-spoken ones of
`bench.voice_turns`), and speaks again 1 s after each reply's last chunk. A caller the app
turns away (`--max-sessions`: HTTP 503, `AgentBusy`) is counted as refused; a clip with no
reply in 120 s as unanswered. A clip can make more than one turn (a pause inside it that the
end of turn took for the end, the rest said over the reply), so turns and clips are counted
apart. Figures are the
app's own records (`/agent/export` of each session): voice-to-voice, the end-of-turn wait,
ASR, TTFT, first piece, TTS first audio, transport and the hand-offs, per N. On a host with
`nvidia-smi`, the GPU's utilisation is sampled every second, and on any host the cores each
kind of process used (the app's, the model server's, the callers': `/proc`). Writes
OUT/capacity.json and OUT/capacity.md (command, date, machine) after each N, so a sweep cut
short keeps what it measured; prints the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.metrics import STAGES, percentile
from app.ops.launch import ROOT, AppServer
from app.ops.machine import describe, machine
from app.web.client import AgentBusy, VoiceClient
from bench.settings import parse_settings
from bench.voice_turns import clips

STAMPS = [*STAGES, "received"]
"""The records' timeline: each stamp's median moment after the last voiced frame (the gaps
between them are the queue waits and the stages)."""
FIGURES = ["v2v_ms", "eot_wait_ms", "asr_ms", "asr_after_speech_ms", "ttft_ms",
           "first_piece_ms", "tts_first_audio_ms", "transport_ms", "handoff_ms"]


def caller(url: str, auth, said: list, turns: int, seed: int, out: dict) -> None:
    """One conversation: `turns` clips, each after the previous reply; its records in `out`."""
    rng = random.Random(seed)
    time.sleep(rng.uniform(0.0, 2.0))
    try:
        with VoiceClient(url, auth=auth) as client:
            for i in range(turns):
                _, x = said[(seed + i) % len(said)]
                try:
                    client.say(x, timeout_s=120)
                except TimeoutError as exc:
                    out["timeouts"] = out.get("timeouts", 0) + 1
                    out["error"] = str(exc)
                time.sleep(1.0)
            time.sleep(2.0)  # an anchor's measurement of the last turn, if there is one
            out["rows"] = client.export()
    except AgentBusy as exc:
        out["refused"] = str(exc)


class GpuSampler:
    """nvidia-smi's utilisation every second, while the sweep runs (none without a GPU)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                self.samples.append(float(out.stdout.split()[0]))

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


class CpuSampler:
    """The cores each kind of process used, from `/proc` every second: the app (with
    `--workers`: its first process, which holds the ASR), its workers, the model server
    (vLLM's API server and engine), HAProxy, the callers (this process) and the rest."""

    KINDS = ("app", "app workers", "model server", "balancer", "callers", "other")

    def __init__(self) -> None:
        self.ticks = dict.fromkeys(self.KINDS, 0.0)
        self.seconds = 0.0
        self._hz = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _kind(self, pid: int, kinds: dict[int, str]) -> str:
        """By the command line, else the parent's kind (vLLM's engine and a worker's
        helpers are spawned processes with command lines of their own)."""
        if pid in kinds:
            return kinds[pid]
        if pid == os.getpid():
            return "callers"
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
            parent = int(self._stat(pid)[1])
        except (OSError, IndexError, ValueError):
            return "other"
        if "haproxy" in cmd:
            kind = "balancer"
        elif "-m app" in cmd:
            kind = "app workers" if " --worker " in f"{cmd} " else "app"
        elif "vllm" in cmd.lower() or "gpu_servers" in cmd:
            kind = "model server"
        else:
            kind = self._kind(parent, kinds) if parent > 1 else "other"
        kinds[pid] = kind
        return kind

    @staticmethod
    def _stat(pid: int) -> list[str]:
        """/proc/PID/stat's fields after the command name (which may hold spaces): state,
        ppid, ..."""
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    def _used(self, pid: int) -> float:
        fields = self._stat(pid)
        return float(fields[11]) + float(fields[12])  # utime + stime, in ticks

    def _snapshot(self) -> dict[int, float]:
        used = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    used[int(entry.name)] = self._used(int(entry.name))
                except (OSError, IndexError, ValueError):  # gone meanwhile
                    pass
        return used

    def _run(self) -> None:
        kinds: dict[int, str] = {}
        before, t0 = self._snapshot(), time.monotonic()
        while not self._stop.wait(1.0):
            now, t1 = self._snapshot(), time.monotonic()
            for pid, ticks in now.items():
                self.ticks[self._kind(pid, kinds)] += ticks - before.get(pid, 0.0)  # new: all
            self.seconds += t1 - t0
            before, t0 = now, t1

    def cores(self) -> dict[str, float] | None:
        """Mean cores busy per kind of process over the sampled time."""
        if not self.seconds:
            return None
        return {k: round(v / self._hz / self.seconds, 2) for k, v in self.ticks.items()}

    def __enter__(self) -> CpuSampler:
        if Path("/proc/self/stat").exists():
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def sweep_point(url: str, auth, said: list, n: int, turns: int) -> dict:
    outs: list[dict] = [{} for _ in range(n)]
    threads = [threading.Thread(target=caller, args=(url, auth, said, turns, i, outs[i]),
                                daemon=True) for i in range(n)]
    t0 = time.monotonic()
    with GpuSampler() as gpu, CpuSampler() as cpu:
        for t in threads:
            t.start()
        deadline = t0 + turns * 150 + 60
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    rows = [r for o in outs for r in o.get("rows", [])
            if r["endpoint"] == "primary" and r["source"] == "voice"]
    ok = [r for r in rows if not r["error"]]
    point = {"sessions": n, "turns_asked": n * turns, "answered": len(ok),
             "failed": len(rows) - len(ok),
             "timeouts": sum(o.get("timeouts", 0) for o in outs),
             "callers_unfinished": sum(t.is_alive() for t in threads),
             "refused": sum(1 for o in outs if "refused" in o),
             "wall_s": round(time.monotonic() - t0, 1),
             "gpu_util_mean": round(sum(gpu.samples) / len(gpu.samples), 1)
             if gpu.samples else None,
             "gpu_util_max": max(gpu.samples) if gpu.samples else None,
             "cores_used": cpu.cores(), "cores": os.cpu_count()}
    for f in FIGURES:
        values = [r[f] for r in ok if r.get(f) is not None]
        point[f] = {"p50": percentile(values, 50), "p90": percentile(values, 90),
                    "max": max(values) if values else None}
    point["timeline_p50"] = {k: percentile([r["timeline"][k] for r in ok
                                             if (r.get("timeline") or {}).get(k) is not None],
                                            50) for k in STAMPS}
    point["rows"] = rows
    return point


def markdown(points: list[dict], command: str, machine_line: str) -> str:
    named = any(p.get("setting") for p in points)
    lines = [f"Measured {dt.date.today()} on {machine_line}; command: `{command}`.", "",
             ("| setting " if named else "") +
             "| sessions | turns answered / clips said | clips unanswered | refused | "
             "v2v p50 | v2v p90 | v2v max | eot wait p50 | "
             "ASR done after speech p50 | TTFT p50 | TTS first audio p50 | transport p50 | "
             "hand-offs p50 | GPU util mean / max |",
             ("|---" if named else "") + "|---" * 14 + "|"]
    for p in points:
        gpu = "–" if p["gpu_util_mean"] is None else f"{p['gpu_util_mean']} / {p['gpu_util_max']}"
        lines.append(
            (f"| {p['setting']} " if named else "") +
            f"| {p['sessions']} | {p['answered']} / {p['turns_asked']} | "
            f"{p['timeouts'] + p.get('callers_unfinished', 0)} | {p['refused']} | "
            f"{p['v2v_ms']['p50']} | {p['v2v_ms']['p90']} | {p['v2v_ms']['max']} | "
            f"{p['eot_wait_ms']['p50']} | {p['asr_after_speech_ms']['p50']} | "
            f"{p['ttft_ms']['p50']} | {p['tts_first_audio_ms']['p50']} | "
            f"{p['transport_ms']['p50']} | {p['handoff_ms']['p50']} | {gpu} |")
    lines += ["", "Where the median turn's time goes: each stamp's p50, ms after the last "
              "voiced frame (`timeline` of the records).", "",
              ("| setting " if named else "") + "| sessions | " + " | ".join(STAMPS) + " |",
              ("|---" if named else "") + "|---" * (len(STAMPS) + 1) + "|"]
    for p in points:
        t = p.get("timeline_p50") or {}
        lines.append((f"| {p['setting']} " if named else "") + f"| {p['sessions']} | " +
                     " | ".join(str(t.get(k, "–")) for k in STAMPS) + " |")
    lines += ["", "Cores busy on average while the callers talked, by kind of process (`/proc`).",
              "", ("| setting " if named else "") + "| sessions | cores | " +
              " | ".join(CpuSampler.KINDS) + " |",
              ("|---" if named else "") + "|---" * (len(CpuSampler.KINDS) + 2) + "|"]
    for p in points:
        c = p.get("cores_used") or {}
        lines.append((f"| {p['setting']} " if named else "") +
                     f"| {p['sessions']} | {p.get('cores', '–')} | " +
                     " | ".join(str(c.get(k, "–")) for k in CpuSampler.KINDS) + " |")
    if named:  # each setting's v2v p50 against the first's, at the same N
        first = points[0]["setting"]
        base = {p["sessions"]: p["v2v_ms"]["p50"] for p in points if p["setting"] == first}
        ratios = [f"{p['setting']} / {first} at {p['sessions']}: "
                  f"{p['v2v_ms']['p50'] / base[p['sessions']]:.2f}" for p in points
                  if p["setting"] != first and base.get(p["sessions"]) and p["v2v_ms"]["p50"]]
        if ratios:
            lines += ["", "Voice-to-voice p50 ratio " + "; ".join(ratios)]
    return "\n".join(lines) + "\n"


def sweep(app_args: list[str], name: str, n_list: list[int], turns: int, said: list,
          out: Path, start_timeout: float, done: list[dict], write) -> list[dict]:
    """One app, started as a user starts it, swept over `n_list` callers; `write(points)`
    after each N, with the points of the settings before (`done`)."""
    log = out / (f"app-{name}.log" if name else "app.log")
    app = AppServer(app_args, log_path=log).start()
    points = []
    try:
        app.wait_healthy(timeout_s=start_timeout)
        for n in n_list:
            point = {"setting": name, **sweep_point(app.url, app.credentials, said, n, turns)}
            points.append(point)
            write(done + points)
            print(f"{name + ': ' if name else ''}{n} sessions: {point['answered']} of "
                  f"{point['turns_asked']} answered, {point['refused']} refused, v2v p50 "
                  f"{point['v2v_ms']['p50']} ms, p90 {point['v2v_ms']['p90']} ms", flush=True)
    finally:
        app.stop()
    return points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", default="1,2,4", help="comma-separated N to sweep")
    ap.add_argument("--turns", type=int, default=3, help="clips each caller says")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "capacity")
    ap.add_argument("--start-timeout", type=float, default=900)
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=FLAGS",
                    help="sweep the app again with these flags added, e.g. "
                    "workers2='--workers 2' (repeatable; the first sweep is named 'base')")
    ap.add_argument("app_args", nargs=argparse.REMAINDER, help="-- then the app's flags")
    args = ap.parse_args()
    try:
        n_list = [int(x) for x in args.sessions.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--sessions wants numbers like 1,2,4, not {args.sessions!r}") from None
    if not n_list or min(n_list) < 1:
        raise SystemExit("--sessions wants at least one N of 1 or more")
    app_args = [a for a in args.app_args if a != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    named = parse_settings(args.setting)
    if "base" in named:
        raise SystemExit("--setting base: 'base' is the sweep with the app's own flags; "
                         "name yours otherwise")
    settings = [("base" if args.setting else "", []), *named.items()]
    said = clips()
    command = "python -m bench.capacity " + " ".join(sys.argv[1:])
    m = machine()

    def write(points: list[dict]) -> str:
        (args.out / "capacity.json").write_text(json.dumps(
            {"date": str(dt.date.today()), "command": command, "machine": m, "points": points},
            indent=1, ensure_ascii=False))
        table = markdown(points, command, describe(m))
        (args.out / "capacity.md").write_text(table)
        return table

    points: list[dict] = []
    for name, extra in settings:
        points += sweep([*app_args, *extra], name, n_list, args.turns, said, args.out,
                        args.start_timeout, points, write)
    print(write(points))


if __name__ == "__main__":
    main()
