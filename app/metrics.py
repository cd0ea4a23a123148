"""Per-turn latency record. Every figure names its start and end event.

One `TurnMetrics` per endpoint per turn; the page renders them and the export is these
records serialised.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import asdict, dataclass, fields


@dataclass
class TurnMetrics:
    turn_id: int
    endpoint: str
    source: str = "voice"
    """"voice" (microphone or uploaded audio) or "text" (typed)."""
    model: str = ""
    """Served model name of the endpoint."""
    order: str = ""
    """A/B scheduling of this turn: "primary" (the reply the user heard), "after-primary"
    (anchor, sent once the primary turn finished) or "concurrent" (sent with the primary)."""
    asr_ms: float | None = None
    """ASR call start -> transcript ready."""
    ttft_ms: float | None = None
    """Chat request sent -> first non-empty content delta received."""
    ms_per_token: float | None = None
    """Mean inter-token gap after the first token: (last delta - first delta) / (tokens - 1)."""
    reply_tokens: int | None = None
    """Completion tokens, from the server's usage report (else the number of deltas)."""
    prompt_tokens: int | None = None
    """Prompt tokens, from the server's usage report."""
    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache, when the server reports them."""
    llm_turn_ms: float | None = None
    """Chat request sent -> stream closed."""
    server_ttft_ms: float | None = None
    """vLLM /metrics: time_to_first_token histogram (sum / count) over this request."""
    server_itl_ms: float | None = None
    """vLLM /metrics: mean inter-token latency over this request."""
    server_requests: int | None = None
    """Requests the server finished between the /metrics snapshots (1: the figures above are
    this request's alone)."""
    prefix_hit_tokens: int | None = None
    """vLLM /metrics: prompt tokens served from the prefix cache during this request."""
    tts_first_audio_ms: float | None = None
    """First reply piece handed to TTS -> its audio ready."""
    server_v2v_ms: float | None = None
    """End of user speech (VAD estimate) -> first reply audio handed to the browser."""
    v2v_ms: float | None = None
    """End of user speech -> first reply audio playing in the browser (server part + the
    browser's own receive -> playback-start delay, measured by the page's player)."""
    tts_engine: str = ""
    """Engine(s) that spoke this turn, e.g. "edge" or "piper (edge failed)"."""
    cancelled: bool = False
    """The user barged in and the reply was cut."""
    error_stage: str = ""
    """Stage that failed this turn ("asr", "llm", "tts", "input"), empty when none failed."""
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


FIGURES = ["asr_ms", "ttft_ms", "ms_per_token", "reply_tokens", "llm_turn_ms",
           "tts_first_audio_ms", "v2v_ms", "cached_tokens"]
LABELS = {
    "asr_ms": "ASR ms", "ttft_ms": "TTFT ms", "ms_per_token": "ms/token",
    "reply_tokens": "reply tokens", "llm_turn_ms": "LLM turn ms",
    "tts_first_audio_ms": "TTS first audio ms", "v2v_ms": "voice-to-voice ms",
    "server_v2v_ms": "voice-to-voice (server) ms", "cached_tokens": "cached prompt tokens",
    "prompt_tokens": "prompt tokens",
}


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def token_gap_ms(first: float, last: float, tokens: int) -> float | None:
    """Mean gap between tokens after the first; None when fewer than two tokens came."""
    if tokens < 2:
        return None
    return round((last - first) * 1000.0 / (tokens - 1), 2)


def median(rows: list[TurnMetrics], name: str) -> float | None:
    values = [getattr(r, name) for r in rows if getattr(r, name) is not None and not r.error]
    return round(statistics.median(values), 1) if values else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, q in [0, 100]."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def to_csv(rows: list[TurnMetrics]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(TurnMetrics)])
    writer.writeheader()
    for row in rows:
        writer.writerow(row.to_dict())
    return out.getvalue()


def to_json(rows: list[TurnMetrics]) -> str:
    return json.dumps([r.to_dict() for r in rows], ensure_ascii=False, indent=1)


def from_json(text: str) -> list[TurnMetrics]:
    return [TurnMetrics(**row) for row in json.loads(text)]
