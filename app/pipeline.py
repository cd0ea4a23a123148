"""One conversational turn, written out in order: ASR -> LLM (streamed) -> chunked TTS.

The model's reply is read on this thread and cut into pieces; a TTS worker thread speaks
the pieces while the model still generates, so the token timing is not disturbed by
synthesis.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.asr import Asr
from app.chunking import SentenceChunker
from app.config import AppConfig, Endpoint
from app.llm import LlmError, StreamStats, stream_chat
from app.messages import SpeechChunk
from app.metrics import TurnMetrics, ms, token_gap_ms
from app.padding import (
    CARD_BLOCKS,
    PaddingError,
    block_size,
    pad_to_block,
    system_token_counter,
)
from app.servermetrics import ServerView, ServerViews
from app.session import Session
from app.tts import FallbackTts, TtsError, language_of

log = logging.getLogger(__name__)
AudioSink = Callable[[SpeechChunk, bool], None]


@dataclass
class TurnInput:
    turn_id: int
    source: str
    """"voice" or "text"."""
    text: str = ""
    audio: np.ndarray | None = None
    speech_end: float | None = None
    """perf_counter() when the user stopped speaking (voice) or pressed send (text)."""


class Agent:
    """The stages shared by every session: set up once, used by many turns."""

    def __init__(self, cfg: AppConfig, asr: Asr | None = None, tts: FallbackTts | None = None):
        from app.tts import build_tts

        self.cfg = cfg
        self.asr = asr or Asr(cfg.asr)
        self.tts = tts or build_tts(cfg.tts)
        self.persona = load_persona(cfg.persona)
        self.persona_note = "not padded"
        self.server_views = ServerViews()

    def setup(self) -> None:
        self.asr.setup()
        self.tts.setup()

    def pad_persona(self) -> str:
        """Pad the persona to the primary server's prefix-cache block; say what was done."""
        if not self.cfg.persona_padding:
            self.persona_note = "padding off"
            return self.persona_note
        endpoint = self.cfg.primary
        block, source = block_size(endpoint, self.cfg.persona_block)
        if not block:
            block, source = CARD_BLOCKS["bf16-ssm"], "card default"
        try:
            padded = pad_to_block(self.persona, system_token_counter(endpoint), block)
        except PaddingError as exc:
            self.persona_note = f"not padded ({exc})"
            return self.persona_note
        self.persona = padded.text
        self.persona_note = (f"{padded.original_tokens:,} tokens, padded to {padded.tokens:,} "
                             f"= {padded.tokens // block} x {block}-token blocks ({source})")
        return self.persona_note

    def messages(self, session: Session) -> list[dict]:
        """Persona + the history window. The window's start moves in jumps of half its size,
        not one turn at a time: a sliding start changes the prompt right after the persona
        on every turn and the prefix cache then serves nothing past it (measured:
        docs/PERFORMANCE.md)."""
        with session.lock:
            session.history_start = history_start(len(session.history),
                                                  session.history_start,
                                                  self.cfg.llm.history_turns)
            keep = session.history[session.history_start:]
        return [{"role": "system", "content": self.persona}, *keep]

    def run_turn(self, session: Session, turn: TurnInput, sink: AudioSink,
                 cancel: threading.Event, endpoint: Endpoint | None = None) -> TurnMetrics:
        endpoint = endpoint or self.cfg.primary
        anchor = self.cfg.anchor
        m = self._new_row(session, turn, endpoint, "primary" if anchor else "")
        # 1. ASR
        text, language = turn.text, self.cfg.language
        if turn.audio is not None:
            session.touch("Transcribing...")
            try:
                tr = self.asr.process(turn.turn_id, turn.audio)
            except Exception as exc:  # a broken model file or runtime error: report the stage
                return _fail(session, m, "asr", f"speech recognition failed: {exc}")
            m.asr_ms = ms(tr.asr_end - tr.asr_start)
            text, language = tr.text, tr.language if language == "auto" else language
            if not text:
                return _fail(session, m, "asr", "No words recognised; please try again.")
        with session.lock:
            session.history.append({"role": "user", "content": text})
            session.chat += [{"role": "user", "content": text},
                             {"role": "assistant", "content": ""}]
        messages = self.messages(session)
        # A/B on separate GPUs: the anchor gets the same messages at the same moment
        rival = None
        if anchor is not None and self.cfg.ab_mode == "concurrent":
            rival = threading.Thread(target=self.measure, daemon=True,
                                     args=(session, turn, anchor, messages, cancel, "concurrent"))
            rival.start()
        # 2. LLM, streamed; 3. pieces go to the TTS worker as soon as they are complete
        session.touch("Thinking...")
        pieces: queue.Queue = queue.Queue()
        speaker = threading.Thread(target=self._speak, daemon=True, name=f"tts-{turn.turn_id}",
                                   args=(session, turn, pieces, sink, cancel, m, language))
        speaker.start()
        stats, error = self._stream_to_speaker(session, endpoint, messages, m, pieces, cancel)
        speaker.join(timeout=60)
        # 4. history keeps what was said, marked when cut
        self._record_reply(session, m, stats, error, cancel)
        # 5. A/B on one GPU: the anchor runs once the primary turn is over
        if anchor is not None and rival is None:
            self.measure(session, turn, anchor, messages, cancel, "after-primary")
        elif rival is not None:
            rival.join()
        if error:
            return _fail(session, m, "llm", error)
        session.touch("Interrupted." if m.cancelled else "Ready.")
        return m

    def _new_row(self, session: Session, turn: TurnInput, endpoint: Endpoint,
                 order: str) -> TurnMetrics:
        m = TurnMetrics(turn.turn_id, endpoint.name, source=turn.source, model=endpoint.model,
                        order=order)
        with session.lock:
            session.metrics.append(m)
        return m

    def _stream_to_speaker(self, session: Session, endpoint: Endpoint, messages: list[dict],
                           m: TurnMetrics, pieces: queue.Queue,
                           cancel: threading.Event) -> tuple[StreamStats, str]:
        """Stream the reply onto the page and, cut into pieces, into the TTS queue."""
        stats, chunker, error = StreamStats(), SentenceChunker(), ""
        before = self.server_views.before(endpoint)
        try:
            for delta in stream_chat(endpoint, messages, self.cfg.llm, m.turn_id, stats, cancel):
                with session.lock:
                    session.chat[-1]["content"] += delta.text
                    if m.ttft_ms is None:  # shown while the reply still streams
                        m.ttft_ms = ms(delta.t - stats.sent)
                session.touch("Speaking...")
                for piece in chunker.push(delta.text):
                    pieces.put(piece)
        except LlmError as exc:
            error = str(exc)
        if not cancel.is_set():
            for piece in chunker.flush():
                pieces.put(piece)
        pieces.put(None)
        fill_llm_figures(m, stats)
        fill_server_view(m, self.server_views.after(endpoint, before))
        return stats, error

    def _record_reply(self, session: Session, m: TurnMetrics, stats: StreamStats, error: str,
                      cancel: threading.Event) -> None:
        reply = "".join(stats.text).strip()
        m.cancelled = cancel.is_set()
        with session.lock:
            if reply:
                session.history.append({"role": "assistant", "content": reply})
            else:
                session.history.pop()  # a failed turn leaves no dangling user message
            note = " [interrupted]" if m.cancelled else (" [cut off]" if error and reply else "")
            session.chat[-1]["content"] = (reply + note) if reply else ""
            if not reply:
                session.chat.pop()

    def measure(self, session: Session, turn: TurnInput, endpoint: Endpoint,
                messages: list[dict], cancel: threading.Event, order: str) -> TurnMetrics:
        """The same request to another endpoint, timed the same way; not spoken, not kept."""
        m = self._new_row(session, turn, endpoint, order)
        if cancel.is_set():
            m.cancelled = True
            return m
        session.touch(f"Measuring {endpoint.name}...")
        stats = StreamStats()
        before = self.server_views.before(endpoint)
        try:
            for _ in stream_chat(endpoint, messages, self.cfg.llm, turn.turn_id, stats, cancel):
                pass
        except LlmError as exc:
            m.error_stage, m.error = "llm", str(exc)
        fill_llm_figures(m, stats)
        fill_server_view(m, self.server_views.after(endpoint, before))
        m.cancelled = cancel.is_set()
        session.touch()
        return m

    def _speak(self, session: Session, turn: TurnInput, pieces: queue.Queue, sink: AudioSink,
               cancel: threading.Event, m: TurnMetrics, language: str) -> None:
        first, engines = True, []
        while (piece := pieces.get()) is not None:
            if cancel.is_set():
                continue
            if first and self.cfg.persona_tag:
                piece = piece.removeprefix(self.cfg.persona_tag).strip()
                if not piece:
                    continue
            lang = language_of(piece, default=language if language in ("en", "zh") else "en")
            t0 = time.perf_counter()
            try:
                pcm, rate, engine, note = self.tts.synthesize(piece, lang)
            except TtsError as exc:
                m.error_stage, m.error = "tts", str(exc)
                session.touch(f"TTS failed: {exc}")
                continue
            label = f"{engine} ({note})" if note else engine
            if label not in engines:
                engines.append(label)
                m.tts_engine = ", ".join(engines)
            if note:
                session.touch(f"Speaking with {engine}: {note}")
            if cancel.is_set():
                continue
            now = time.perf_counter()
            if first:
                m.tts_first_audio_ms = ms(now - t0)
                if turn.speech_end is not None:
                    m.server_v2v_ms = ms(now - turn.speech_end)
            sink(SpeechChunk(turn.turn_id, pcm, rate, piece, engine, now), first)
            first = False


def history_start(n_messages: int, start: int, max_turns: int) -> int:
    """Index of the first history message to send: unchanged while the window holds at most
    `max_turns` user/assistant pairs (plus the new user message), then moved up to keep the
    newest half of them. History alternates user/assistant, so the start stays even."""
    pending = n_messages % 2  # the new user message, not answered yet
    if n_messages - start <= 2 * max_turns + pending:
        return start
    return n_messages - 2 * max(1, max_turns // 2) - pending


def fill_llm_figures(m: TurnMetrics, stats: StreamStats) -> None:
    m.ttft_ms = ms(stats.first - stats.sent) if stats.first else None
    m.ms_per_token = token_gap_ms(stats.first, stats.last, stats.tokens) if stats.first else None
    m.reply_tokens, m.prompt_tokens = stats.tokens, stats.prompt_tokens
    m.cached_tokens = stats.cached_tokens
    m.llm_turn_ms = ms(stats.closed - stats.sent) if stats.closed else None


def fill_server_view(m: TurnMetrics, view: ServerView | None) -> None:
    if view is not None:
        m.server_ttft_ms, m.server_itl_ms = view.ttft_ms, view.itl_ms
        m.server_requests, m.prefix_hit_tokens = view.requests, view.prefix_hit_tokens


def _fail(session: Session, m: TurnMetrics, stage: str, message: str) -> TurnMetrics:
    m.error_stage, m.error = stage, message
    with session.lock:
        session.chat.append({"role": "assistant", "content": f"⚠ {message}",
                             "metadata": {"title": f"{stage} error"}})
    session.touch(f"Error ({stage}): {message}")
    log.warning("turn %s failed at %s: %s", m.turn_id, stage, message)
    return m


def load_persona(path: Path) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SystemExit(f"Cannot read the persona file {path}: {exc}") from exc
    if not text:
        raise SystemExit(f"The persona file {path} is empty.")
    return text
