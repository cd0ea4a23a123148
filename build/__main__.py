"""`python -m build SUBCOMMAND`: the project's build-side tools.

  latency   the model card's latency protocol against OpenAI-compatible endpoints
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def latency(args: argparse.Namespace) -> None:
    from build.latency import markdown, parse_endpoint, run
    from build.plot import strip_chart

    endpoints = [parse_endpoint(e, args.api_key) for e in args.endpoint]
    if len({e.name for e in endpoints}) != len(endpoints):
        raise SystemExit("endpoint names must differ")
    result = run(endpoints, reps=args.reps, turns=args.turns, streams=args.streams,
                 stream_rounds=args.stream_rounds, max_tokens=args.max_tokens,
                 block=args.block, persona_path=args.persona, progress=not args.quiet)
    date = dt.date.today().isoformat()
    command = "python -m build " + " ".join(sys.argv[1:])
    result.update(command=command, date=date)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    table = markdown(result, command, date)
    (args.out / "latency.md").write_text(table)
    strip_chart(result, args.out / "latency.png")
    print(table)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m build", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    lat = sub.add_parser("latency", help="TTFT / turn / ms-per-token medians, card protocol")
    lat.add_argument("--endpoint", action="append", required=True,
                     help="NAME=BASE_URL,MODEL (repeat; endpoints are interleaved)")
    lat.add_argument("--api-key", default="EMPTY")
    lat.add_argument("--reps", type=int, default=3)
    lat.add_argument("--turns", type=int, default=18, help="user turns used (of 18)")
    lat.add_argument("--streams", type=int, default=5)
    lat.add_argument("--stream-rounds", type=int, default=3)
    lat.add_argument("--max-tokens", type=int, default=64)
    lat.add_argument("--block", type=int, default=0,
                     help="prefix-cache block to pad the persona to (0: ask each server)")
    lat.add_argument("--persona", type=Path, default=ROOT / "persona" / "default.md")
    lat.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "latency")
    lat.add_argument("--quiet", action="store_true")
    lat.set_defaults(func=latency)
    args = p.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
