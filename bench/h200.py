"""Several layouts served side by side on one GPU, measured by the card's harness.

    python -m bench.h200 --out OUT \
        --server lowlat=lowlat --server anchor=experts-only \
        --server 'lowlat-cg256=lowlat:["--max-cudagraph-capture-size","256"]' \
        [--profile lowlat]

Each server is `python -m vllm.entrypoints.openai.api_server` over a `build.dryrun` directory
(`--load-format dummy`, the card's flags), with a fixed KV-cache budget so several servers
start at once on one GPU without their memory profiling seeing each other. Then
`build.latency` runs the card's protocol with the endpoints interleaved request by request,
so layouts and levers are compared within one run. `--profile NAME` takes a torch-profiler
trace of one server over a few turns and writes its kernels per decode step
(`bench/trace_summary.py`). Replies are random text (dummy weights): only time is measured.

A LAYOUT that is a checkpoint directory (`python -m build`'s output) is served with its own
weights and the card's flags: `--server lowlat=/root/out/lowlat`. Servers are text only
(`--language-model-only`) unless named by `--vision`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.ops.launch import CARD_FLAGS, VllmServer, free_port
from app.paths import ROOT
from app.stages.llm import Endpoint
from build import dryrun


def parse_server(spec: str) -> tuple[str, str, list[str]]:
    name, _, rest = spec.partition("=")
    layout, _, extra = rest.partition(":")
    return name, layout, (json.loads(extra) if extra else [])


def start_all(specs, models: Path, out: Path, kv_bytes: int, util: float,
              profile: str | None, vision: tuple[str, ...] = ()) -> dict[str, VllmServer]:
    servers, first = {}, None
    for name, layout, extra in specs:
        if Path(layout).is_dir() and not dryrun.is_dry_run(layout):
            # a checkpoint directory (`python -m build`'s output): its own weights
            mdir, model_flags = Path(layout), [*CARD_FLAGS, *extra]
        else:
            mdir = models / layout
            if not dryrun.is_dry_run(mdir):
                dryrun.write(layout, mdir, tokenizer_from=first)
            first = first or mdir
            model_flags = dryrun.serve_flags(extra)
        flags = [*model_flags,
                 "--gpu-memory-utilization", str(util),
                 "--kv-cache-memory-bytes", str(kv_bytes),
                 "--gdn-prefill-backend", "triton"]
        if name not in vision:
            flags.append("--language-model-only")
        if name == profile:
            flags += ["--profiler-config", json.dumps({
                "profiler": "torch", "torch_profiler_dir": str(out.parent / "trace"),
                "torch_profiler_with_stack": False, "ignore_frontend": True})]
        # "ENV:KEY=VALUE" items in the extra list set the server's environment
        env = dict(x[4:].split("=", 1) for x in flags if x.startswith("ENV:"))
        flags = [x for x in flags if not x.startswith("ENV:")]
        servers[name] = VllmServer(model=str(mdir), served_name=name, port=free_port(),
                                   extra_args=flags, python=sys.executable,
                                   log_path=out / f"{name}.log",
                                   env={"VLLM_USE_FLASHINFER_SAMPLER": "0", **env}).start()
    return servers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", required=True,
                    help="NAME=LAYOUT|DIR[:JSON list of extra vLLM flags and ENV:KEY=VALUE]")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", type=Path, default=Path("/root/models"))
    ap.add_argument("--kv-gib", type=float, default=4.0)
    ap.add_argument("--util", type=float, default=0.2,
                    help="only vLLM's start check; the KV budget is --kv-gib")
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=25)
    ap.add_argument("--profile", default=None, help="NAME of a server to profile")
    ap.add_argument("--vision", action="append", default=[],
                    help="NAME of a server that keeps the vision tower (default: text only)")
    ap.add_argument("--block", type=int, default=0,
                    help="prefix-cache block to pad the persona to (0: ask each server)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    specs = [parse_server(s) for s in args.server]
    t0 = time.time()
    servers = start_all(specs, args.models, args.out, int(args.kv_gib * 2**30), args.util,
                        args.profile, tuple(args.vision))

    def wait(item):
        name, srv = item
        try:
            srv.wait_healthy(args.start_timeout - (time.time() - t0))
            return name, round(time.time() - t0, 1), None
        except Exception as e:  # noqa: BLE001 - report which one failed and go on
            return name, None, str(e)[-600:]

    with ThreadPoolExecutor(len(servers)) as pool:
        started = list(pool.map(wait, servers.items()))
    for name, secs, err in started:
        print(f"{name}: " + (f"up after {secs:.0f} s" if secs else f"FAILED {err}"), flush=True)
    up = [n for n, s, _ in started if s]
    if not up:
        raise SystemExit("no server started")
    from build.latency import markdown, run
    from build.plot import strip_chart

    endpoints = [Endpoint(n, servers[n].base_url, n, "EMPTY") for n in up]
    result = run(endpoints, reps=args.reps, turns=18, streams=5, stream_rounds=3,
                 max_tokens=args.max_tokens, block=args.block,
                 persona_path=ROOT / "persona" / "default.md", progress=False)
    command = "python -m bench.h200 " + " ".join(sys.argv[1:])
    date = dt.date.today().isoformat()
    result.update(command=command, date=date, start_s={n: s for n, s, _ in started},
                  layouts={n: lay for n, lay, _ in specs},
                  weights={n: "dummy (random)" if dryrun.is_dry_run(servers[n].model)
                           else "the checkpoint's own" for n in servers})
    (args.out / "latency.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    table = markdown(result, command, date)
    (args.out / "latency.md").write_text(table)
    strip_chart(result, args.out / "latency.png")
    print(table, flush=True)
    if args.profile in up:
        from bench.trace_summary import profile_turns

        print(profile_turns(servers[args.profile], args.out.parent / "trace",
                            args.out / f"profile-{args.profile}.md"), flush=True)
    for srv in servers.values():
        srv.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
