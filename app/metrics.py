"""Per-turn latency record. Every figure names its start and end event.

One `TurnMetrics` per endpoint per turn; the page renders them and the export is these
records serialised.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import asdict, dataclass, field, fields


@dataclass
class TurnMetrics:
    turn_id: int
    endpoint: str
    source: str = "voice"
    """"voice" (microphone or uploaded audio) or "text" (typed); through the Realtime
    endpoint "realtime-voice" and "realtime-text" (`Session.channel`)."""
    model: str = ""
    """Served model name of the endpoint."""
    order: str = ""
    """A/B scheduling of this turn: "primary" (the reply the user heard), "after-primary"
    (anchor, sent once the primary turn finished) or "concurrent" (sent with the primary)."""
    asr_ms: float | None = None
    """ASR call start -> transcript ready."""
    utterance_ms: float | None = None
    """Length of the user's audio the transcript was read from (a turn that continued an
    earlier one: both parts)."""
    ttft_ms: float | None = None
    """Chat request sent -> first non-empty content delta received."""
    ms_per_token: float | None = None
    """Mean inter-token gap after the first token: (last delta - first delta) / (tokens - 1)."""
    reply_tokens: int | None = None
    """Completion tokens, from the server's usage report (else the number of deltas)."""
    prompt_tokens: int | None = None
    """Prompt tokens, from the server's usage report."""
    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache, when the server reports them (not for a
    reply the spoken-reply budget ended: its stream closes before the usage details)."""
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
    eot_wait_ms: float | None = None
    """Last voiced frame (browser) -> end of turn committed (the silence the endpointer
    waits for)."""
    ran_after_ms: float | None = None
    """A/B anchor: the primary turn finished -> this request sent. The request waits until
    the conversation is idle (no speech, no reply in flight or playing)."""
    retries: int = 0
    """A/B anchor: times the user's next turn cancelled this request, which was sent again
    once the conversation was idle."""
    eot_signal: str = ""
    """What ended the user's turn: the end-of-turn detector's signal and what it saw
    ("words: ends with “for”", "model: p(end)" and the probability), or the silence that
    reached the fixed end or the cap (app/stages/endofturn.py)."""
    asr_after_speech_ms: float | None = None
    """Last voiced frame -> transcript ready (ASR starts speculatively at a short pause)."""
    first_piece_ms: float | None = None
    """First reply token -> first speakable piece complete (the tokens of the first clause
    or first few words)."""
    first_piece_tokens: int | None = None
    """Reply tokens (stream deltas) the first piece needed."""
    tts_first_audio_ms: float | None = None
    """First reply piece complete -> its audio synthesised."""
    held_ms: float | None = None
    """First audio ready before the turn was committed: how long it waited for the commit."""
    mic_wait_ms: float | None = None
    """The first audio waited this long for the microphone's frames: they came in late, and
    until they caught up the turn-taking could not know whether the user's voice was back
    (app/core/turn.py `_mic_behind`)."""
    voice_wait_ms: float | None = None
    """The first audio waited this long for the user's voice, back after the commit, to go
    (app/core/turn.py `voice_back`): the user might have been going on. Its own figure, so that
    the stages between the last voiced frame and the first sample heard leave no gap."""
    transport_ms: float | None = None
    """First audio sent by the server -> received by the page."""
    playback_ms: float | None = None
    """First audio received by the page -> its first sample audible (scheduling + output
    latency)."""
    v2v_ms: float | None = None
    """Voice-to-voice: last voiced microphone frame -> first reply sample audible, both on
    the browser's clock (typed turns: send pressed -> first sample audible)."""
    interrupt_ms: float | None = None
    """Barge-in: the microphone frame that decided it -> the player silent (browser)."""
    reply_gap_ms: float | None = None
    """Silence inside the reply as the page played it: after the first audio, each piece
    that arrived after the one before had played out waited this long, summed (the player's
    "done" or "stopped"; a pause for the user's words is not counted)."""
    reply_gaps: int | None = None
    """How many pieces came after the one before had played out (`reply_gap_ms`)."""
    reply_audio_ms: float | None = None
    """The reply's speech as synthesised, all its pieces: how long it takes to hear it out
    (what the spoken-reply budget bounds)."""
    heard_chars: int | None = None
    """Barge-in: characters of the reply the user heard; the history keeps only those."""
    handoff_ms: float | None = None
    """The chain's hand-offs between threads summed (`HANDOFFS`: time no stage works on the
    turn, e.g. a queue's wait for the TTS thread)."""
    timeline: dict = field(default_factory=dict)
    """Stage events in ms after the last voiced frame (typed turns: after send): the
    waterfall of where the turn's time went."""
    tts_engine: str = ""
    """Engine(s) that spoke this turn, e.g. "edge" or "piper (edge failed)"."""
    cancelled: bool = False
    """The user barged in and the reply was cut."""
    budget_ended: bool = False
    """The reply said its `--reply-sentences` or `--reply-seconds` and the rest was never
    generated."""
    continued_in: int | None = None
    """The user went on within `--turn-continue-ms` of this turn's last word: turn N
    answered its words with the rest, and this turn left the conversation."""
    error_stage: str = ""
    """Stage that failed this turn ("asr", "llm", "tts", "input"), empty when none failed."""
    error: str = ""
    final: bool = False
    """Nothing will change this record any more (the chain is over and the player said
    what it played; an anchor's: its last try ran): the page draws it then, once."""

    def to_dict(self) -> dict:
        return asdict(self)


FIGURES = ["v2v_ms", "eot_wait_ms", "asr_ms", "asr_after_speech_ms", "ttft_ms",
           "first_piece_ms", "tts_first_audio_ms", "transport_ms", "playback_ms",
           "handoff_ms", "ms_per_token", "reply_tokens", "llm_turn_ms", "cached_tokens",
           "interrupt_ms", "reply_gap_ms"]
LABELS = {
    "asr_ms": "ASR ms", "ttft_ms": "TTFT ms", "ms_per_token": "ms/token",
    "reply_tokens": "reply tokens", "llm_turn_ms": "LLM turn ms",
    "tts_first_audio_ms": "TTS first audio ms", "v2v_ms": "voice-to-voice ms",
    "cached_tokens": "cached prompt tokens", "prompt_tokens": "prompt tokens",
    "eot_wait_ms": "end-of-turn wait ms", "asr_after_speech_ms": "ASR done after speech ms",
    "first_piece_ms": "first piece tokens ms", "transport_ms": "transport ms",
    "playback_ms": "playback start ms", "interrupt_ms": "interrupt-to-silence ms",
    "held_ms": "held for commit ms", "mic_wait_ms": "waited for the microphone ms",
    "handoff_ms": "hand-offs ms", "reply_gap_ms": "silence inside the reply ms",
    "voice_wait_ms": "waited for the user's voice ms",
}
# Server stage events in the order a turn passes them (the waterfall's rows).
STAGES = ["start", "asr_start", "asr_decode", "asr_end", "asr_handed", "judged", "model_go",
          "committed", "llm_sent", "first_token", "first_piece", "tts_start", "first_audio",
          "first_sent", "socket_sent"]
"""start: the turn begins (a voice turn: at the user's first short pause); asr_start: its
thread asks for ASR; asr_decode / asr_end: the ASR worker decodes; asr_handed: the turn's
thread has the words; model_go: the silence is long enough for the model request
(`VadConfig.model_after_ms`; only where it held one); tts_start: the TTS thread takes the
first piece; first_sent: the first audio is handed to the event loop; socket_sent: the loop
writes it to the socket (inside transport, first_sent -> received, so not a hand-off of its
own)."""
HANDOFFS = [("start", "asr_start", "turn thread starts"),
            ("asr_start", "asr_decode", "ASR worker picks up"),
            ("asr_end", "asr_handed", "transcript back to the turn"),
            ("asr_handed", "llm_sent", "request built (from model_go if later)"),
            ("first_piece", "tts_start", "TTS thread picks up")]
"""The chain's hand-offs between threads and stages: (from, to, what happens between)."""


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


def fill_timeline(m: TurnMetrics, stamps: dict[str, float], last_voiced_ms: float | None,
                  clock) -> None:  # app.clock.BrowserClock
    """Every stage figure of a turn from its stamps: server events (perf_counter seconds),
    and the player's `received_ms` / `audible_ms` (browser milliseconds)."""
    voice = last_voiced_ms is not None and clock.known
    t0 = clock.to_server(last_voiced_ms) if voice else stamps.get("start")
    if t0 is None:
        return
    line = {k: round((stamps[k] - t0) * 1000, 1) for k in STAGES if k in stamps}
    received, audible = stamps.get("received_ms"), stamps.get("audible_ms")
    if received is not None and clock.known:
        line["received"] = round(clock.to_server(received) * 1000 - t0 * 1000, 1)
    if received is not None and audible is not None:
        m.playback_ms = round(audible - received, 1)
        if "received" in line:
            line["audible"] = round(line["received"] + m.playback_ms, 1)
        elif "first_sent" in line:  # a typed turn before any microphone frame: no offset
            line["audible"] = round(line["first_sent"] + m.playback_ms, 1)
    m.timeline = line
    if last_voiced_ms is not None and audible is not None:
        m.v2v_ms = round(audible - last_voiced_ms, 1)  # the browser's clock alone
    elif not voice and "audible" in line:
        m.v2v_ms = line["audible"]

    def span(a: str, b: str) -> float | None:
        return round(line[b] - line[a], 1) if a in line and b in line else None

    def handoff(a: str, b: str) -> float | None:
        if a == "asr_handed" and line.get("model_go", 0) > line.get(a, 0):
            a = "model_go"  # the request waited for the silence, not for a thread
        return span(a, b)

    m.eot_wait_ms = line.get("committed") if voice else None
    m.asr_after_speech_ms = line.get("asr_end") if voice else None
    m.first_piece_ms = span("first_token", "first_piece")
    m.tts_first_audio_ms = span("first_piece", "first_audio")
    held = span("first_audio", "committed")
    m.held_ms = held if held is not None and held > 0 else None
    if "mic_behind" in stamps and "first_sent" in stamps:
        m.mic_wait_ms = ms(stamps["first_sent"] - stamps["mic_behind"])
    if "voice_back" in stamps and "first_sent" in stamps and "first_audio" in stamps:
        wait = stamps["first_sent"] - max(stamps["first_audio"], stamps["voice_back"])
        m.voice_wait_ms = ms(wait) if wait > 0 else None
    m.transport_ms = span("first_sent", "received")
    gaps = [g for a, b, _ in HANDOFFS if (g := handoff(a, b)) is not None]
    m.handoff_ms = round(sum(gaps), 1) if gaps else None


def fill_llm(m: TurnMetrics, stats, view=None) -> None:
    """A request's figures from its stream (`app.stages.llm.StreamStats`) and the server's own
    view of it (`app.stages.servermetrics.ServerView`, when the server publishes one)."""
    m.ttft_ms = ms(stats.first - stats.sent) if stats.first else None
    m.ms_per_token = token_gap_ms(stats.first, stats.last, stats.tokens) if stats.first else None
    m.reply_tokens, m.prompt_tokens = stats.tokens, stats.prompt_tokens
    m.cached_tokens = stats.cached_tokens
    m.llm_turn_ms = ms(stats.closed - stats.sent) if stats.closed else None
    if view is not None:
        m.server_ttft_ms, m.server_itl_ms = view.ttft_ms, view.itl_ms
        m.server_requests, m.prefix_hit_tokens = view.requests, view.prefix_hit_tokens


def fill_rival(m: TurnMetrics, stats, view, error: str, cancelled: bool,
               ran_after_ms: float | None = None, retries: int = 0) -> None:
    """The anchor's record of a turn: its request's figures, how and when it ran."""
    if stats is not None:
        fill_llm(m, stats, view)
    m.error_stage, m.error = ("llm", error) if error else ("", "")
    m.cancelled = cancelled
    m.ran_after_ms, m.retries = ran_after_ms, retries
