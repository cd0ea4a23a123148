"""`python -m app`: the voice agent on existing endpoints, `--demo` on the CPU, or `--launch`
on a GPU host (starts the primary and the anchor vLLM servers with the model card's flags)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.config import DEMO_ASR_THREADS, DEMO_REPLY_S, AppConfig
from app.ops.cli import from_args, parse
from app.ops.gpuplan import format_plan, gpu_memory_gib, gpu_servers, plan_gpus
from app.ops.launch import (
    DEMO_SERVED_NAME,
    VllmServer,
    all_cpus,
    app_cpus,
    cpu_choices,
    cpu_server,
)
from app.ops.machine import one_blas_thread
from app.ops.prepare import tiny_en_dir
from app.paths import ROOT
from app.stages.asr_config import AsrConfig
from app.stages.llm import LlmError, check_endpoint, compare_tokenizers, dry_run_info

ANCHOR_SERVED_NAME = DEMO_SERVED_NAME + "-anchor"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops like Ctrl-C: servers are shut down, not orphaned


def demo_servers(args: argparse.Namespace) -> list[VllmServer]:
    """The CPU default: the embedded model as primary and, for the A/B, as anchor."""
    primary = cpu_server(port=args.vllm_port or None, compiled=args.vllm_compiled)
    args.base_url, args.model = primary.base_url, DEMO_SERVED_NAME
    servers = [primary]
    if not args.no_ab and not args.anchor_base_url:
        # Until `python -m build` makes the W4A16 layout of the small model, the anchor is the
        # same bf16 weights served without prefix caching: a second serving configuration.
        # It shares the primary's core at idle priority: a user's turn takes the core from
        # it at once (its request, cut short, is sent again when the conversation is idle).
        anchor = cpu_server(served_name=ANCHOR_SERVED_NAME, log_name="vllm-cpu-anchor.log",
                            prefix_caching=False, compiled=args.vllm_compiled)
        anchor.idle_priority = True
        args.anchor_base_url, args.anchor_model = anchor.base_url, ANCHOR_SERVED_NAME
        servers.append(anchor)
    return servers


def apply_demo_preset(args: argparse.Namespace) -> None:
    """The embedded model's settings, shared by --demo, the tests and the benchmarks
    (`--preset demo`); flags given explicitly win."""
    if args.persona is None:
        args.persona = ROOT / "persona" / "small-en.md"
    if args.repetition_penalty is None:
        args.repetition_penalty = 1.15  # the 135M model loops under pure greedy decoding
    if args.reply_seconds is None:
        args.reply_seconds = DEMO_REPLY_S
    if args.model_languages is None:
        args.model_languages = "en"  # SmolLM2-135M speaks English only
    if not args.cpus:
        args.cpus = app_cpus()  # off the core vLLM's worker spins on
        args.asr_cpus = args.asr_cpus or all_cpus()
    if args.asr_threads is None and args.asr_device == "cpu":
        args.asr_threads = DEMO_ASR_THREADS
    if args.asr_model == AsrConfig.model and args.language in (None, "auto", "en"):
        # English-only tiny.en transcribes (several times faster than base, docs/PERFORMANCE.md);
        # base tells the language, so Mandarin speech gets the notice, not a wrong reply
        args.asr_model = tiny_en_dir()
        if args.language != "en" and not args.asr_detect_model:
            args.asr_detect_model = AsrConfig.model


def launch_servers(args: argparse.Namespace) -> list[VllmServer]:
    """A GPU host: primary + anchor with the card's flags, one GPU each or one shared."""
    gpus = gpu_memory_gib()
    plans = plan_gpus(args.primary_checkpoint, args.anchor_checkpoint or None, gpus)
    print(format_plan(plans, gpus), flush=True)
    served = {"primary": args.model, "anchor": args.anchor_model or "anchor"}
    servers = gpu_servers(plans, served, base_port=args.vllm_port or 8000,
                          vllm_cmd=args.vllm_python, extra=args.vllm_arg,
                          dense_int4_kernel=args.dense_int4_kernel)
    args.base_url = servers[0].base_url
    if len(servers) == 2:
        args.anchor_base_url, args.anchor_model = servers[1].base_url, served["anchor"]
    return servers


def dry_run_notice(cfg: AppConfig) -> str:
    notes = []
    for role, ep in (("primary", cfg.primary), ("anchor", cfg.anchor)):
        info = ep and dry_run_info(ep)
        if info:
            notes.append(f"\n\n⚠ The {role} serves a **dry-run** directory (layout "
                         f"`{info.get('layout')}`, dummy weights): replies are random text; "
                         f"only the timings mean something.")
    if cfg.tts.stand_in:
        notes.append("\n\n⚠ `--tts-stand-in`: the voice reads stand-in clauses, not the "
                     "model's words; when each piece is spoken is still the model's.")
    return "".join(notes)


def notice(cfg: AppConfig) -> str:
    if cfg.anchor is None:
        return (f"Model: `{cfg.primary.model}` (no anchor endpoint: A/B off)."
                + dry_run_notice(cfg))
    text = (f"**A/B** · primary `{cfg.primary.model}` (heard) vs anchor `{cfg.anchor.model}` "
            f"(measured, {cfg.ab_mode}) · same messages, greedy, thinking off.")
    same = compare_tokenizers(cfg.primary, cfg.anchor)
    if same == "different":
        text += ("\n\n⚠ **The two endpoints tokenize differently**: token counts and ms/token "
                 "are not like for like; compare TTFT and turn time only.")
    elif same == "unknown":
        text += "\n\n(Tokenizers could not be compared: no /tokenize route.)"
    return text + dry_run_notice(cfg)


def run_workers(args: argparse.Namespace, argv: list[str], servers: list[VllmServer]) -> None:
    """`--workers N`: the app N times behind HAProxy (app/ops/workers.py), on the servers started
    here, until Ctrl-C."""
    from app.ops.workers import Workers
    from app.stages.asrhost import AsrHost
    from app.stages.tts.host import TtsHost

    cfg = from_args(args)  # the flags' errors once, here, not N times in the workers' logs
    endpoints = {"--base-url": cfg.primary.base_url, "--model": cfg.primary.model}
    if cfg.anchor is not None:
        endpoints |= {"--anchor-base-url": cfg.anchor.base_url,
                      "--anchor-model": cfg.anchor.model}
    folder = tempfile.TemporaryDirectory(prefix="voice-agent-hosts-")
    asr = AsrHost(cfg.asr, Path(folder.name))
    endpoints["--asr-host"] = asr.address
    tts = TtsHost(cfg.tts, Path(folder.name), cfg.cpus) if cfg.tts.shared else None
    if tts is not None:
        endpoints["--tts-host"] = tts.address
    workers = Workers(argv, args.workers, cfg.host, cfg.port, cfg.max_sessions, cfg.cpus,
                      endpoints, auth=cfg.auth, ssl_certfile=cfg.ssl_certfile,
                      ssl_keyfile=cfg.ssl_keyfile)
    try:
        print("Loading the ASR all workers share ...", flush=True)
        asr.start()
        print(f"ASR ready (warm-up decode {asr.asr.warmup_ms:,.0f} ms, paid at start)",
              flush=True)
        if tts is not None:
            tts.start()
            print(f"Voice shared by the workers: {tts.readers} clauses at once", flush=True)
        with ThreadPoolExecutor() as pool:
            list(pool.map(lambda s: s.wait_healthy(), servers))
        workers.start()
        scheme = "https" if cfg.ssl_certfile else "http"
        print(f"\n  Voice agent running on {scheme}://{cfg.host}:{cfg.port}  ({args.workers} "
              "workers behind HAProxy; Ctrl-C stops)\n", flush=True)
        workers.supervise()
    finally:
        workers.stop()
        asr.stop()
        if tts is not None:
            tts.stop()
        folder.cleanup()


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    one_blas_thread()  # this process's, and each worker's (each runs this main)
    signal.signal(signal.SIGTERM, _interrupt)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    servers: list[VllmServer] = []
    if args.demo and not args.worker:  # a worker uses the servers its parent started
        servers = demo_servers(args)
    if args.demo or args.preset == "demo":
        apply_demo_preset(args)
    elif args.launch and not args.worker:
        servers = launch_servers(args)
    try:
        for s in servers:  # inside the try: a stop during the start stops those started
            print(f"Starting vLLM {s.served_name} on port {s.port} (log: {s.log_path}) ...",
                  flush=True)
            s.start()
        if args.workers > 1:
            run_workers(args, argv if argv is not None else sys.argv[1:], servers)
            return
        from app.core.pipeline import Agent
        from app.web.server import create_app, serve

        cfg = from_args(args)
        # the whole machine's, before this process is pinned
        choices = cpu_choices(args.vllm_compiled, cfg.asr.cpu_threads)
        if cfg.cpus:
            os.sched_setaffinity(0, cfg.cpus)  # before any thread pool starts
        agent = Agent(cfg)
        print("Loading speech models ...", flush=True)
        agent.setup()
        print(f"ASR ready (warm-up decode {agent.asr.warmup_ms:,.0f} ms, paid at start"
              + (", the parent's, shared by all workers)" if cfg.asr.host else ")"), flush=True)
        with ThreadPoolExecutor() as pool:
            list(pool.map(lambda s: s.wait_healthy(), servers))
        for ep in filter(None, (cfg.primary, cfg.anchor)):
            try:
                served = check_endpoint(ep)
                if ep.model not in served:
                    print(f"warning: {ep.base_url} serves {served}, not {ep.model!r}",
                          file=sys.stderr)
            except LlmError as exc:
                print(f"warning: {ep.name}: {exc}. Turns fail until it answers.", file=sys.stderr)
        print(f"Persona {cfg.persona.name}: {agent.pad_persona()}", flush=True)
        agent.warm()  # the persona into the servers' prefix caches, before a first turn
        if agent.detector.model is not None:
            try:
                agent.detector.model.setup()
            except (LlmError, OSError) as exc:
                print(f"warning: end of turn by the model's words is off: {exc}",
                      file=sys.stderr)
                agent.detector.uses.discard("model")
        print(agent.detector.describe(), flush=True)
        if cfg.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"warning: listening on {cfg.host}: anyone who can reach it and knows the "
                  "password can use the agent.", file=sys.stderr)
        page_notice = notice(cfg) + f"\n\nPersona `{cfg.persona.name}`: {agent.persona_note}."
        if args.demo:
            print(choices, flush=True)
            page_notice += f"\n\n{choices}."
        app = create_app(agent, title=f"Voice agent · {cfg.primary.model}", notice=page_notice)
        scheme = "https" if cfg.ssl_certfile else "http"
        serve(app, cfg.host, cfg.port,
              f"\n  Voice agent running on {scheme}://{cfg.host}:{cfg.port}  (Ctrl-C stops)\n",
              ssl_certfile=cfg.ssl_certfile, ssl_keyfile=cfg.ssl_keyfile)
    except KeyboardInterrupt:
        pass
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
