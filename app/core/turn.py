"""One turn in flight, between the stages that produce it and the session that shows it.

A voice turn starts speculatively at a short pause (`VadEvent` "pause"): ASR, the model and
TTS run, but nothing reaches the conversation or the speaker until the turn-taking commits
the turn (the end-of-turn verdict, or the endpointer's "end"). If the user goes on instead
("resume"), the turn is discarded without a trace. A committed turn publishes its user
message and reply into the session (`ConversationLog`, app/core/turnlog.py) and releases the
audio it holds (`AudioGate`, app/core/audiogate.py).

The turn is also the one owner of its metrics: the stages stamp events (`stamp`), the
player's reports arrive here, and `app.metrics.fill_timeline` derives every figure from
the stamps in one place. It also says when its records are final (`on_final`): readers
that keep figures (app/web/prometheus.py) read a record then, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app.core.audiogate import AudioGate
from app.core.session import Session
from app.core.turnlog import ConversationLog, remove_entries
from app.messages import EndOfTurn, PlayerReport, ReplyDelta, SpeechChunk, Transcript
from app.metrics import TurnMetrics, fill_llm, fill_timeline, ms

log = logging.getLogger(__name__)


class Signal(threading.Event):
    """A flag of the turn that also wakes whoever waits on the turn (`Turn._changed`)."""

    def __init__(self, changed: threading.Condition, on: bool = False) -> None:
        super().__init__()
        self._changed = changed
        if on:
            super().set()

    def set(self) -> None:
        super().set()
        with self._changed:
            self._changed.notify_all()


@dataclass
class Turn(AudioGate, ConversationLog):
    session: Session
    metrics: TurnMetrics
    last_voiced_ms: float | None = None
    """Browser time of the user's last voiced frame (voice turns from the microphone)."""
    cancel: Signal = field(init=False)
    model_go: Signal = field(init=False)
    """The turn may send its model request: set unless the turn-taking holds a speculative
    turn's request for a longer silence (`VadConfig.model_after_ms`)."""
    stamps: dict[str, float] = field(default_factory=dict)
    """Server times of the stage events: asr_start, asr_end, committed, llm_sent,
    first_token, first_piece, first_audio, first_sent."""
    thread: threading.Thread | None = None
    audio: np.ndarray | None = field(default=None, repr=False)
    """The user's utterance this voice turn answers (16 kHz): what a continuation joins."""
    continues: Turn | None = field(default=None, repr=False)
    """The committed turn whose words this one answers again with the rest (the user went
    on within `TurnConfig.continue_ms`): publishing this turn withdraws that one."""
    user_text: str | None = None
    reply: str = ""
    pieces: dict[int, str] = field(default_factory=dict)
    """Spoken pieces by index: what the player's `heard` shares refer to."""
    collect: list[SpeechChunk] | None = None
    """Every chunk of the reply, for API callers that want the whole reply's audio."""
    sent: list[SpeechChunk] = field(default_factory=list, repr=False)
    """The chunks that went out to the listener, in order: what speech over the reply is
    matched against, to tell its echo (`app.stages.echo`)."""
    verdict: EndOfTurn | None = None
    """The end-of-turn decision on this speculative turn's transcript, once it came."""
    on_final: Callable[[TurnMetrics], None] | None = None
    """Told once per record of this turn that the user had, when nothing will write it
    again: the primary's when the chain is over and the page's player has said its last
    word on the turn (or no page listens), an anchor's when its request ran its last try."""
    _committed: bool = False
    _published: bool = False
    _held: list[SpeechChunk] = field(default_factory=list)
    _voice_back: bool = False
    """The user's voice came back after the commit, before any of the reply was sent: the
    reply's audio waits (`voice_back`)."""
    _end_waits: bool = False
    """The chain ended while the reply's audio waited (for the user's voice or the
    microphone): its "end" goes after the audio."""
    _heard: tuple[float, float] | None = None
    """(server time at which the newest microphone frame the turn-taking has handled was
    captured, server time it handled it): `mic_heard`; None without a microphone."""
    _mic_wait: float | None = None
    """When the first audio began to wait for the microphone's frames (`_mic_behind`)."""
    _user_msg: dict | None = None
    _chat_user: dict | None = None
    _reply_msg: dict | None = None
    _chat_reply: dict | None = None
    _interrupted: bool = False
    _engines: list[str] = field(default_factory=list)
    _chain_over: bool = False
    _to_page: bool = False
    """Audio or an "end" went to a page: its player will report "done" or "stopped"."""
    _player_over: bool = False
    _changed: threading.Condition = field(default_factory=threading.Condition, repr=False)
    """Notified when the turn is committed, cancelled or its model request released: the
    chain waits on it, without polling."""

    def __post_init__(self) -> None:
        self.cancel = Signal(self._changed)
        self.model_go = Signal(self._changed, on=True)

    @property
    def turn_id(self) -> int:
        return self.metrics.turn_id

    @property
    def committed(self) -> bool:
        return self._committed

    @property
    def published(self) -> bool:
        return self._published

    def stamp(self, name: str, t: float | None = None) -> None:
        self.stamps.setdefault(name, time.perf_counter() if t is None else t)

    # --- speculation ------------------------------------------------------------------------
    def judged(self, verdict: EndOfTurn) -> None:
        """The end-of-turn detector's verdict on this turn's words came."""
        self.stamp("judged")
        self.verdict = verdict

    def commit(self, reason: str = "") -> None:
        """The user's turn has ended (`reason`: what said so): the turn may speak."""
        if self.cancel.is_set():
            return  # discarded before the silence confirmed it
        self.stamp("committed")
        if not self.model_go.is_set():
            self.stamp("model_go")  # the request waited for the commit
            self.model_go.set()
        if self.continues is not None:
            reason += f" (continues turn {self.continues.turn_id})"
        self.metrics.eot_signal = reason
        with self.session.lock:
            self._committed = True
            self._publish_if_ready()
        with self._changed:
            self._changed.notify_all()
        self._settle()

    def discard(self) -> None:
        """The user went on: drop the turn, which was never shown or heard."""
        self.cancel.set()
        with self.session.lock:
            self._held.clear()

    def wait_model_go(self, timeout_s: float = 30.0) -> bool:
        """Block until the model request may go (True) or the turn is dropped (False); a
        turn nothing released nor dropped in `timeout_s` is dropped, as `wait_decided`."""
        with self._changed:
            self._changed.wait_for(lambda: self.model_go.is_set() or self.cancel.is_set(),
                                   timeout_s)
        return self.model_go.is_set() and not self.cancel.is_set()

    def wait_decided(self, timeout_s: float = 30.0) -> bool:
        """Block until the turn is committed (True) or cancelled (False)."""
        with self._changed:
            self._changed.wait_for(lambda: self._committed or self.cancel.is_set(), timeout_s)
        return self._committed

    # --- what the stages produce --------------------------------------------------------------
    def transcribed(self, tr: Transcript, audio_s: float) -> None:
        """The transcript of `audio_s` seconds of the user's audio is known."""
        self.metrics.utterance_ms = ms(audio_s)
        self.stamp("asr_decode", tr.asr_start)
        self.stamp("asr_end", tr.asr_end)
        self.stamp("asr_handed")
        self.metrics.asr_ms = ms(tr.asr_end - tr.asr_start)
        if tr.text:
            with self.session.lock:
                self.session.heard_language = tr.language

    def on_delta(self, delta: ReplyDelta, sent: float) -> None:
        """A piece of the reply streamed in (`sent`: when the request went)."""
        self.stamp("first_token", delta.t)
        if self.metrics.ttft_ms is None:  # shown while the reply still streams
            self.metrics.ttft_ms = ms(delta.t - sent)
        self.add_reply(delta.text)

    def budget_ended(self) -> None:
        """The reply reached the spoken-reply budget: the rest was never generated."""
        self.metrics.budget_ended = True

    def piece_cut(self, index: int, tokens: int) -> None:
        """The chunker cut piece `index` after `tokens` reply tokens."""
        if index == 0:
            self.stamp("first_piece")
            self.metrics.first_piece_tokens = tokens

    def streamed(self, stats, view) -> None:  # app.stages.llm.StreamStats, ServerView
        """The reply's stream is over: its figures, and the server's own view of them."""
        fill_llm(self.metrics, stats, view)

    def spoke_with(self, engine: str) -> None:
        """A piece was synthesised by `engine` (with the reason when it was a fallback)."""
        self.stamp("first_audio")
        if engine not in self._engines:
            self._engines.append(engine)
            self.metrics.tts_engine = ", ".join(self._engines)

    def stage_failed(self, stage: str, message: str) -> None:
        """A stage failed without ending the turn (a TTS piece), or said why the turn is
        not an answer (a language notice)."""
        self.metrics.error_stage, self.metrics.error = stage, message

    def fail(self, stage: str, message: str) -> None:
        """The turn failed at `stage`: its row says so, the conversation shows the message."""
        m, s = self.metrics, self.session
        m.error_stage, m.error = stage, message
        with s.lock:
            if m not in s.metrics:
                s.metrics.append(m)
            s.chat.append({"role": "assistant", "content": f"⚠ {message}",
                           "metadata": {"title": f"{stage} error"}})
        self.refresh()
        s.touch(f"Error ({stage}): {message}")

    def add_rival(self, m: TurnMetrics) -> None:
        """Another endpoint's record of this turn (the A/B anchor), beside the primary's."""
        with self.session.lock:
            self.session.metrics.append(m)

    def set_user_text(self, text: str) -> None:
        with self.session.lock:
            self.user_text = text
            self._publish_if_ready()

    def add_reply(self, delta: str) -> None:
        with self.session.lock:
            self.reply += delta
            if self._published and not self._interrupted:
                self._reply_msg["content"] = self.reply
                self._chat_reply["content"] = self.reply
        if self._published and self.session.outbox is None:
            self.session.touch("Speaking...")
        # a page gets the text with each piece of its voice (`_send`), not at every token:
        # each render is a round trip and a re-render of the chat, and on two cores that
        # page shares the CPU with the model, ASR and TTS (docs/PERFORMANCE.md)

    # --- the end of the turn ---------------------------------------------------------------------
    def finish(self, error: str = "") -> None:
        """The stages are done: keep what was said (marked when cut), drop an empty turn."""
        m, s = self.metrics, self.session
        m.cancelled = self.cancel.is_set() and self._published
        with s.lock:
            if not self._published:
                return
            reply = self.reply.strip()
            if not reply:  # nothing was said: no dangling user message
                remove_entries(s.history, self._user_msg, self._reply_msg)
                remove_entries(s.chat, self._chat_reply)
                return
            if not self._interrupted:  # else the player's report already cut it
                note = " [interrupted]" if m.cancelled else (
                    " [cut off]" if error else (" [reply budget]" if m.budget_ended else ""))
                self._reply_msg["content"] = reply
                self._chat_reply["content"] = reply + note
        if not m.cancelled:
            with s.lock:
                self._end_waits = self._voice_back or bool(self._held)  # sent after it
                if not self._end_waits:
                    self._send_end()
        self.refresh()

    def on_player(self, report: PlayerReport) -> None:
        """The page's player said what it did with this turn's audio."""
        m, over = self.metrics, report.kind in ("done", "stopped")
        if report.kind == "audible":
            self.stamps["audible_ms"] = report.t_ms
            if report.received_ms is not None:
                self.stamps["received_ms"] = report.received_ms
        elif report.kind == "stopped":
            if report.cause_ms is not None:
                m.interrupt_ms = _round(report.t_ms - report.cause_ms)
            self._cut_to_heard(report.heard)
        if over and report.gap_ms is not None:
            m.reply_gap_ms, m.reply_gaps = _round(report.gap_ms), report.gaps
        self.refresh()
        if over:
            self._player_over = True
            self._settle()

    def refresh(self) -> None:
        fill_timeline(self.metrics, self.stamps, self.last_voiced_ms, self.session.clock)
        self.session.touch()

    # --- when the records are final ----------------------------------------------------------
    def chain_over(self) -> None:
        """The turn's thread is done: no stage writes the record any more. Unless a page
        was sent something of it, no player report will come either."""
        self._chain_over = True
        self._player_over = self._player_over or not self._to_page
        self._settle()

    def player_gone(self) -> None:
        """No report will come for this turn: the page went away, or the turn is no longer
        among the ones its reports are matched to."""
        self._player_over = True
        self._settle()

    def rival_over(self, m: TurnMetrics, status: str | None = None) -> None:
        """An anchor's request for this turn ran its last try: its record `m` is final."""
        with self.session.lock:
            m.final = True
        self.session.touch(status)  # the page draws it now
        if self.on_final is not None:
            self.on_final(m)

    def _settle(self) -> None:
        with self.session.lock:  # a record the session shows: not a dropped speculation
            shown = any(r is self.metrics for r in self.session.metrics)
            final = self._chain_over and self._player_over and shown and not self.metrics.final
            self.metrics.final = self.metrics.final or final
        if final:
            self.session.touch()  # the page draws it now
            if self.on_final is not None:
                self.on_final(self.metrics)


def _round(ms: float) -> float:
    return round(ms, 1)
