"""`python -m build SUBCOMMAND`: the project's build-side tools.

  latency   the model card's latency protocol against OpenAI-compatible endpoints
  fidelity  reference answers from one endpoint, NLL / matches / probes of candidates
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
    command = args.command_line
    result.update(command=command, date=date)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    table = markdown(result, command, date)
    (args.out / "latency.md").write_text(table)
    strip_chart(result, args.out / "latency.png")
    print(table)


def fidelity(args: argparse.Namespace) -> None:
    from build.fidelity import load, markdown, reference, score
    from build.latency import parse_endpoint

    args.out.mkdir(parents=True, exist_ok=True)
    refs_path = args.references or args.out / "references.jsonl"
    if args.reference:
        ref = parse_endpoint(args.reference, args.api_key)
        reference(ref, refs_path, limit=args.prompts, max_tokens=args.max_tokens)
        print(f"reference answers of {ref.model}: {refs_path}")
    if not refs_path.exists():
        raise SystemExit(f"{refs_path} not found: pass --reference NAME=URL,MODEL first")
    refs = load(refs_path)
    results = [score(parse_endpoint(c, args.api_key), refs, tag=args.tag,
                     max_tokens=args.max_tokens, progress=not args.quiet)
               for c in args.candidate]
    date = dt.date.today().isoformat()
    command = args.command_line
    (args.out / "fidelity.json").write_text(json.dumps(
        {"command": command, "date": date, "references": str(refs_path), "results": results},
        indent=1, ensure_ascii=False))
    table = markdown(results, command, date)
    (args.out / "fidelity.md").write_text(table)
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
    fid = sub.add_parser("fidelity", help="NLL of reference answers, matches, probes")
    fid.add_argument("--reference", default="", help="NAME=BASE_URL,MODEL: answers from it")
    fid.add_argument("--references", type=Path, default=None,
                     help="reference JSONL to reuse (default: OUT/references.jsonl)")
    fid.add_argument("--candidate", action="append", default=[],
                     help="NAME=BASE_URL,MODEL to score (repeat)")
    fid.add_argument("--prompts", type=int, default=18)
    fid.add_argument("--max-tokens", type=int, default=128)
    fid.add_argument("--tag", default="小安：", help="the persona's reply prefix")
    fid.add_argument("--api-key", default="EMPTY")
    fid.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "fidelity")
    fid.add_argument("--quiet", action="store_true")
    fid.set_defaults(func=fidelity)
    args = p.parse_args(argv)
    # what to print as "the command": a wrapper script that calls main() is the command
    args.command_line = ("python -m build " + " ".join(sys.argv[1:])) if argv is None \
        else "python " + " ".join(sys.argv)
    args.func(args)


if __name__ == "__main__":
    main()
