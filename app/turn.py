"""One turn in flight, between the stages that produce it and the session that shows it.

A voice turn starts speculatively at a short pause (`VadEvent` "pause"): ASR, the model and
TTS run, but nothing reaches the conversation or the speaker until the turn-taking commits
the turn (the end-of-turn verdict, or the endpointer's "end"). If the user goes on instead
("resume"), the turn is discarded without a trace. A committed turn publishes its user
message and reply into the session and releases the audio it holds; after that, text and
audio flow straight through, unless the user's voice came back before any of it went out
(`voice_back`): then the audio waits until the voice goes, or is dropped unheard. The first
audio also waits while the turn-taking has not heard the microphone up to the moment it is
ready (`mic_heard`): on a busy machine frames come in late, in bursts, and the voice may be
back already in the ones still on their way.

The turn is also the one owner of its metrics: the stages stamp events (`stamp`), the
player's reports arrive here, and `app.metrics.fill_timeline` derives every figure from
the stamps in one place. It also says when its records are final (`on_final`): readers
that keep figures (app/prometheus.py) read a record then, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from app.language import has_cjk
from app.messages import EndOfTurn, PlayerReport, ReplyDelta, SpeechChunk, Transcript
from app.metrics import TurnMetrics, fill_llm, fill_timeline, ms
from app.session import Session

log = logging.getLogger(__name__)
MIC_SLACK_S = 0.06
"""The microphone counts as heard "up to now" when the newest frame handled was captured
this recently: a little longer than the page's gaps between frames."""
MIC_IDLE_S = 1.0
"""No frame handled for this long: the microphone is off, the first audio waits for none."""


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
class Turn:
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

    def streamed(self, stats, view) -> None:  # app.llm.StreamStats, ServerView
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

    def emit_audio(self, chunk: SpeechChunk) -> None:
        with self.session.lock:
            if self.cancel.is_set():
                return
            self.pieces[chunk.index] = chunk.text
            self.metrics.reply_audio_ms = round((self.metrics.reply_audio_ms or 0.0)
                                                + len(chunk.pcm) * 1000 / chunk.sample_rate, 1)
            if self.collect is not None:
                self.collect.append(chunk)
            hold = not self._published or self._voice_back or bool(self._held) \
                or self._mic_behind()
            if hold:
                self._held.append(chunk)
        if not hold:
            self._send(chunk)

    @property
    def audio_ready(self) -> bool:
        """Reply audio is synthesised and held (for the commit, or the user's voice)."""
        return bool(self._held)

    def voice_back(self, back: bool) -> None:
        """Whether the user's voice is back after the commit (app/conversation.py): while it
        is, and none of the reply has gone to the page, the reply's audio waits. If the
        voice becomes an utterance, the turn is dropped unheard (`drop_held`): the user went
        on after a pause the verdict took for the end. A click or a cough lets it go."""
        with self.session.lock:
            if back == self._voice_back or (back and self._to_page) or self.cancel.is_set():
                return
            self._voice_back = back
            if back:
                self.stamp("voice_back")
            else:
                self._release()

    def mic_heard(self, captured_s: float | None) -> None:
        """The turn-taking thread has handled the microphone up to a frame captured at
        `captured_s` (server time); None: the microphone stopped, no frame will come. Audio
        that waited for the frames to catch up goes once they have."""
        with self.session.lock:
            self._heard = None if captured_s is None else (captured_s, time.perf_counter())
            self._release()

    def recheck_mic(self) -> None:
        """No frame came with the item the turn-taking thread handled: audio that waited for
        the microphone goes once none has come for `MIC_IDLE_S`."""
        with self.session.lock:
            self._release()

    def _mic_behind(self) -> bool:
        """Under the lock, with audio to send and none sent yet: whether the turn-taking
        has not yet heard the microphone up to the moment the audio was ready (its newest
        frame captured more than `MIC_SLACK_S` before). It cannot know then whether the
        user's voice is back: the reply can be audible after the user went on, their frames
        still on their way. No frame handled for `MIC_IDLE_S`: no microphone to wait for."""
        if self._to_page or self._heard is None:
            return False
        captured, handled = self._heard
        now = time.perf_counter()
        if now - handled > MIC_IDLE_S:
            return False
        if self._mic_wait is None:
            if captured >= now - MIC_SLACK_S:
                return False
            self._mic_wait = now
            self.stamp("mic_behind", now)
        return captured < self._mic_wait - MIC_SLACK_S

    def _release(self) -> None:
        """Under the lock: send the audio (and the "end") that waited, once nothing holds it:
        the turn is published, the user's voice is not back, the microphone is heard."""
        if not (self._held or self._end_waits) or not self._published or self._voice_back \
                or self.cancel.is_set() or self._mic_behind():
            return
        held, self._held = self._held, []
        for chunk in held:  # under the lock: before an "end" the turn sends
            self._send(chunk)
        if self._end_waits:
            self._end_waits = False
            self._send_end()

    @property
    def unheard(self) -> bool:
        """Committed, and none of its reply has gone to the page yet."""
        return self._committed and not self._to_page and not self.cancel.is_set()

    @property
    def held_for_voice(self) -> bool:
        """Committed, and its reply waits for the user's voice to go (`voice_back`)."""
        return self._voice_back and self._committed and not self.cancel.is_set()

    def drop_held(self) -> None:
        """The voice that held the reply became an utterance: nothing of the reply is heard
        (its audio and its "end" are not sent), and the record says it was cancelled."""
        self.cancel.set()
        with self.session.lock:
            self._held.clear()
            self._end_waits = False
            self.metrics.cancelled = self._published

    def _send(self, chunk: SpeechChunk) -> None:
        on_sent = None
        if self.session.outbox is not None:
            # stamped before the bytes go: the page's report of them comes back on the event
            # loop's thread, which on a busy machine can run before this one does again
            if "first_sent" not in self.stamps:
                self.stamp("first_sent")
                on_sent = partial(self.stamp, "socket_sent")  # on the event loop
            self._to_page = True
        self.session.send_audio(chunk, on_sent)
        if self._to_page:
            self.session.touch("Speaking...")  # the reply's text so far, with its voice

    def _publish_if_ready(self) -> None:
        """Under the session lock: show the turn once it is committed and its words known."""
        s = self.session
        if self._published or not self._committed or self.user_text is None \
                or self.cancel.is_set():
            return
        self._published = True
        log.info("turn %s (%s): the user said %r", self.turn_id, self.metrics.source,
                 self.user_text[:200])
        if self.continues is not None:
            self.continues.withdraw(self.turn_id)
            self.continues = None  # a chain of continuations holds no earlier turns
        self._user_msg = {"role": "user", "content": self.user_text}
        self._reply_msg = {"role": "assistant", "content": self.reply}
        self._chat_user = {"role": "user", "content": self.user_text}
        self._chat_reply = {"role": "assistant", "content": self.reply}
        s.history += [self._user_msg, self._reply_msg]
        s.chat += [self._chat_user, self._chat_reply]
        s.metrics.append(self.metrics)
        self._release()  # unless it waits for the voice to go (or become a turn)
        if s.outbox is not None and "first_sent" not in self.stamps:
            s.outbox.hold_renders()  # the words show with the voice, not before it
        s.touch()

    def owns(self, message: dict) -> bool:
        """Whether `message` (an entry of the session's history) is this turn's."""
        return message is self._user_msg or message is self._reply_msg

    def withdraw(self, by: int) -> None:
        """Turn `by` answers this turn's words again, with what the user said after them:
        this turn's question and (cut) reply leave the history and the page's chat."""
        s = self.session
        with s.lock:
            self.metrics.continued_in = by
            if not self._published:
                return
            at = next((i for i, m in enumerate(s.history) if m is self._user_msg), None)
            if at is not None and at < s.history_start:
                s.history_start = max(0, s.history_start - 2)
            _remove(s.history, self._user_msg, self._reply_msg)
            _remove(s.chat, self._chat_user, self._chat_reply)
        log.info("turn %s: withdrawn, its words go on in turn %s", self.turn_id, by)

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
                _remove(s.history, self._user_msg, self._reply_msg)
                _remove(s.chat, self._chat_reply)
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

    def _send_end(self) -> None:
        """The reply is over: the page's player reports "done" once it played it all."""
        self._to_page = self._to_page or self.session.outbox is not None
        self.session.send_event({"type": "end", "turn": self.turn_id})

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

    def _cut_to_heard(self, heard: tuple[float, ...]) -> None:
        """Barge-in: history and chat keep only what the user heard."""
        text = heard_text(self.pieces, heard)
        with self.session.lock:
            self._interrupted = True
            self.metrics.cancelled = True
            self.metrics.heard_chars = len(text)
            if self._reply_msg is not None:
                self._reply_msg["content"] = text or "..."
                self._reply_msg["interrupted"] = True
                self._chat_reply["content"] = (text + " …" if text else "…") + " [interrupted]"

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


def heard_text(pieces: dict[int, str], heard: tuple[float, ...]) -> str:
    """The words of each piece in proportion to the share of it that played."""
    out: list[str] = []
    for index, share in enumerate(heard):
        text = pieces.get(index, "")
        if share >= 0.999:
            out.append(text)
        elif share > 0:
            if has_cjk(text):
                out.append(text[:int(len(text) * share)])
            else:
                words = text.split()
                out.append(" ".join(words[:int(len(words) * share)]))
            break
        else:
            break
    return " ".join(p for p in out if p).strip()


def _remove(items: list[dict], *entries: dict | None) -> None:
    for entry in entries:
        for i, item in enumerate(items):
            if item is entry:
                del items[i]
                break


def _round(ms: float) -> float:
    return round(ms, 1)
