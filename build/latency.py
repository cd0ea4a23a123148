"""The model card's latency protocol against OpenAI-compatible endpoints.

Per endpoint: the persona (padded to the server's prefix-cache block), 2 history turns and
one of 18 short spoken Mandarin user turns, x 3 repetitions = 54 requests; greedy,
streaming, thinking off. Endpoints are interleaved request by request, so drift in the
machine hits them alike. Then 5 concurrent streams per endpoint: ms/token per stream and
aggregate tokens/s. Writes JSON (every request), a markdown table in the card's form and a
PNG strip chart.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from app.metrics import percentile, token_gap_ms
from app.stages.llm import Endpoint, LlmConfig, LlmError, StreamStats, dry_run_info, stream_chat
from app.stages.padding import PaddingError, block_size, pad_to_block, system_token_counter

ROOT = Path(__file__).resolve().parent.parent
TURNS_FILE = Path(__file__).parent / "data" / "latency_turns.json"
PERSONA = ROOT / "persona" / "default.md"


@dataclass
class Request:
    index: int
    """Position in the run: endpoints alternate request by request."""
    endpoint: str
    rep: int
    turn: int
    streams: int
    ttft_ms: float | None = None
    turn_ms: float | None = None
    ms_per_token: float | None = None
    reply_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    error: str = ""


def parse_endpoint(spec: str, api_key: str = "EMPTY") -> Endpoint:
    """"name=http://host:port/v1,model" -> Endpoint."""
    name, _, rest = spec.partition("=")
    url, _, model = rest.partition(",")
    if not (name and url and model):
        raise SystemExit(f"--endpoint {spec!r}: expected NAME=BASE_URL,MODEL")
    return Endpoint(name, url, model, api_key)


def persona_for(endpoint: Endpoint, persona: str, block: int) -> tuple[str, str]:
    """The persona padded for this server, and a note saying how."""
    size, _ = block_size(endpoint, block)
    if not size:
        return persona, "not padded (block size unknown: pass --block)"
    try:
        padded = pad_to_block(persona, system_token_counter(endpoint), size)
    except PaddingError as exc:
        return persona, f"not padded ({exc})"
    return padded.text, f"{padded.original_tokens} -> {padded.tokens} tokens (block {size})"


def one(endpoint: Endpoint, messages: list[dict], cfg: LlmConfig, req: Request) -> Request:
    stats = StreamStats()
    t0 = time.perf_counter()
    try:
        for _ in stream_chat(endpoint, messages, cfg, req.turn, stats):
            pass
    except LlmError as exc:
        req.error = str(exc)
        return req
    req.turn_ms = round((time.perf_counter() - t0) * 1000, 1)
    if stats.first is not None:
        req.ttft_ms = round((stats.first - stats.sent) * 1000, 1)
        req.ms_per_token = token_gap_ms(stats.first, stats.last, stats.tokens)
    req.reply_tokens, req.prompt_tokens = stats.tokens, stats.prompt_tokens
    req.cached_tokens = stats.cached_tokens
    return req


def run(endpoints: list[Endpoint], reps: int = 3, turns: int = 18, streams: int = 5,
        stream_rounds: int = 3, max_tokens: int = 64, block: int = 0,
        persona_path: Path = PERSONA, progress: bool = True, warmups: int = 2) -> dict:
    from tqdm import tqdm

    script = json.loads(TURNS_FILE.read_text(encoding="utf-8"))
    user_turns = script["turns"][:turns]
    persona = persona_path.read_text(encoding="utf-8").strip()
    systems, notes = {}, {}
    for ep in endpoints:
        systems[ep.name], notes[ep.name] = persona_for(ep, persona, block)
    cfg = LlmConfig(max_tokens=max_tokens, temperature=0.0, timeout_s=120)

    def messages(ep: Endpoint, turn: int) -> list[dict]:
        return [{"role": "system", "content": systems[ep.name]}, *script["history"],
                {"role": "user", "content": user_turns[turn % len(user_turns)]}]

    for ep in endpoints:  # warm-up: fills the persona's cache blocks, compiles, allocates
        for turn in range(warmups):
            one(ep, messages(ep, turn), cfg, Request(-1, ep.name, -1, turn, 1))
    records: list[Request] = []
    total = reps * len(user_turns) * len(endpoints) + stream_rounds * len(endpoints)
    bar = tqdm(total=total, desc="latency", disable=not progress, file=sys.stderr)
    for rep in range(reps):
        for turn in range(len(user_turns)):
            for ep in endpoints:  # interleaved
                records.append(one(ep, messages(ep, turn), cfg,
                                   Request(len(records), ep.name, rep, turn, 1)))
                bar.update()
    concurrent: dict[str, list[dict]] = {ep.name: [] for ep in endpoints}
    for rnd in range(stream_rounds):
        for ep in endpoints:
            concurrent[ep.name].append(_streams(ep, messages, cfg, streams, rnd, records))
            bar.update()
    bar.close()
    return {"endpoints": [{"name": e.name, "base_url": e.base_url, "model": e.model,
                           "persona": notes[e.name], "weights": weights(e)}
                          for e in endpoints],
            "protocol": {"reps": reps, "turns": len(user_turns), "streams": streams,
                         "stream_rounds": stream_rounds, "max_tokens": max_tokens,
                         "greedy": True, "thinking": False},
            "summary": summarise(records, concurrent),
            "concurrent": concurrent,
            "requests": [asdict(r) for r in records]}


def weights(endpoint: Endpoint) -> str:
    """"real", or what a dry-run directory's marker says (dummy weights: random replies)."""
    info = dry_run_info(endpoint)
    return f"dummy (dry-run {info.get('layout')}): random replies" if info else "real"


def _streams(ep: Endpoint, messages, cfg: LlmConfig, streams: int, rnd: int,
             records: list[Request]) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=streams) as pool:
        done = list(pool.map(lambda i: one(ep, messages(ep, rnd * streams + i), cfg,
                                           Request(-1, ep.name, rnd, i, streams)),
                             range(streams)))
    wall = time.perf_counter() - t0
    records.extend(done)
    tokens = sum(r.reply_tokens or 0 for r in done)
    gaps = [r.ms_per_token for r in done if r.ms_per_token is not None]
    return {"round": rnd, "wall_s": round(wall, 3), "tokens": tokens,
            "aggregate_tok_s": round(tokens / wall, 1) if wall else None,
            "ms_per_token_median": round(statistics.median(gaps), 2) if gaps else None,
            "errors": sum(bool(r.error) for r in done)}


def summarise(records: list[Request], concurrent: dict[str, list[dict]]) -> dict:
    out = {}
    for name in dict.fromkeys(r.endpoint for r in records):
        single = [r for r in records if r.endpoint == name and r.streams == 1 and not r.error]

        def med(field: str, rows: list[Request] = single) -> float | None:
            values = [getattr(r, field) for r in rows if getattr(r, field) is not None]
            return round(statistics.median(values), 2) if values else None

        ttfts = [r.ttft_ms for r in single if r.ttft_ms is not None]
        rounds = concurrent.get(name, [])
        out[name] = {
            "requests": len(single),
            "errors": sum(1 for r in records if r.endpoint == name and r.error),
            "ttft_ms": med("ttft_ms"), "ttft_ms_p90": percentile(ttfts, 90),
            "turn_ms": med("turn_ms"), "ms_per_token": med("ms_per_token"),
            "reply_tokens": med("reply_tokens"), "prompt_tokens": med("prompt_tokens"),
            "cached_tokens": med("cached_tokens"),
            "streams_ms_per_token": _median([r["ms_per_token_median"] for r in rounds]),
            "streams_aggregate_tok_s": _median([r["aggregate_tok_s"] for r in rounds]),
        }
    return out


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def markdown(result: dict, command: str, date: str) -> str:
    streams = result["protocol"]["streams"]
    lines = [f"Measured {date}; command: `{command}`.", "",
             f"| endpoint | model | TTFT / turn / ms·tok (medians, ms) | requests | "
             f"{streams} streams: ms·tok / aggregate tok/s | persona |",
             "|---|---|---|---|---|---|"]
    for ep in result["endpoints"]:
        s = result["summary"][ep["name"]]
        lines.append(f"| {ep['name']} | {ep['model']} | {s['ttft_ms']} / {s['turn_ms']} / "
                     f"{s['ms_per_token']} | {s['requests']} | {s['streams_ms_per_token']} / "
                     f"{s['streams_aggregate_tok_s']} | {ep['persona']} |")
    dummy = [ep["name"] for ep in result["endpoints"] if ep.get("weights", "real") != "real"]
    if dummy:
        lines += ["", f"Dummy weights (dry-run directories) on: {', '.join(dummy)}; their "
                  f"replies are random text, only the timings mean something."]
    return "\n".join(lines) + "\n"
