"""Turn-taking: what each endpointer event, typed message and player report does.

Everything here runs on one thread per session (`Listener`): the microphone's frames, the
page player's reports and the end-of-turn verdicts arrive on one queue, in order.

Agent silent:
    speech_start   a turn being prepared is cancelled: the user goes on
    pause          a turn starts speculatively with the utterance so far; once its
                   transcript is known the end-of-turn detector says how long the silence
                   must last (app/endofturn.py): it commits when the silence is that long
                   (at once for finished words); its reply's audio goes out when ready,
                   and waits while the user's voice is back (a commit the user undoes)
    resume         the speculation is dropped; the utterance goes on as one
    end            the silence reached the cap (detector on) or the fixed silence (off):
                   the speculation is committed (or a turn starts, speculation off)
Agent speaking (its reply is playing in the page), an utterance over it ("over"):
    shorter than barge_in_ms   a cough or an "mhm": nothing happens, the reply goes on
    speech_long (first)        the player pauses (silence first) and ASR checks the words:
                               a command ("wait", "stop") interrupts; the agent's own
                               voice resumes the reply; any
                               other words, a hum or a guess wait, paused ("pending")
    speech_long (pending)      the user went on talking over the paused reply (speech
                               captured after the page reported it silent, its echo gone):
                               words or a command interrupt (two words or more read
                               unsure too, once the voice went on barge_in_ms over the
                               silence: a hum, a cough and the echo stop), echo resumes,
                               a hum or a guess waits on
    pause / end (pending)      if the voice went on for barge_in_ms over the silent,
                               paused reply, the words are checked again: words or a
                               command interrupt. Else the user stopped: it was short (a
                               hum, a remark, the echo that stopped with the reply): the
                               reply resumes, at once after a backchannel, at the end after
                               words or a guess (a pause may be a gap between words)
    end, the reply over        the reply played out during the utterance: a turn only if
                               the user spoke on after its last sample (its echo gone) and
                               the words are not the reply's echo or no words
    An utterance begun before the reply played out is over it even if its speech_start
    (confirmed some voiced frames in) comes after the page's "done".
    An interruption stops the reply (the history keeps what was heard) and the utterance
    becomes the next turn. After one echo verdict in a reply, its later first checks run
    without pausing it (the pause comes only if the words are not the echo again).
The user going on (speech that starts within `continue_ms` of the last committed voice
turn's last word): the turn this utterance makes continues that one: its audio is joined to
that turn's, and its publishing withdraws that turn's question and cut reply. Agent silent,
the reply (not audible yet) stops at speech_start as above. Agent speaking, the words are
checked as above, except: begun before the reply was audible (so not its echo), words stop
it at the first check; pending words whose voice went on for `barge_in_ms` after the
paused reply fell silent stop it at the utterance's pause too (a short going-on: "… two
people"). A command or the agent's echo is no continuation.
No UI text is made here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from app.anchor import AbDone, AbJob, AnchorQueue
from app.endofturn import TurnDetector
from app.interruption import verdict
from app.messages import (
    RATE,
    EndOfTurn,
    MicBytes,
    MicFrame,
    PlayerReport,
    Transcript,
    VadEvent,
)
from app.metrics import TurnMetrics
from app.pipeline import Agent
from app.session import Session
from app.turn import Turn
from app.vad import Endpointer

log = logging.getLogger(__name__)
KEEP_TURNS = 20  # recent turns kept for late player reports
CHECK_SAMPLES = 4 * RATE  # audio an interruption check reads
ECHO_TAIL_MS = 200
"""Speech captured this soon after the paused reply went silent may still be its echo: the
room's delay and reverberation, the browser's output buffer."""


Utterance = Literal["over", "pending", "resumed", "turn"]


@dataclass
class Floor:
    """Who has the floor in one session: the turn-taking state. The microphone, the
    player's reports, the verdicts and the A/B change it on the session's turn-taking thread
    (`Listener`); typed and uploaded turns start under the session's lock."""

    anchor: AnchorQueue
    """The A/B anchor's requests, sent while the conversation is idle."""

    current: Turn | None = None
    """The turn being prepared or spoken (at most one)."""
    turns: dict[int, Turn] = field(default_factory=dict)
    """Recent turns by id, for the player's reports."""
    speaking: int = 0
    """Turn whose audio the page is playing (its "audible" report; 0: silent)."""
    utterance: Utterance | None = None
    """The user's current utterance while the agent speaks: None (none, or begun while the
    agent was silent), "over" (begun over the reply, undecided), "pending" (the reply is
    paused: interrupting if the user goes on), "resumed" (let go: echo, or short; later
    speech is checked again) or "turn" (it interrupted: it becomes the next turn)."""
    utterance_over: int = 0
    """The reply the current utterance began over."""
    reply_ended_ms: float | None = None
    """Browser time at which the last reply played out (the page's "done")."""
    ended_turn: int = 0
    """The turn whose reply played out then."""
    paused_turn: int = 0
    """Turn whose reply the page holds paused for the user's speech (0: none)."""
    paused_silent_ms: float | None = None
    """Browser time at which that pause went silent (the page's report; None until then)."""
    continues: Turn | None = None
    """The committed voice turn the current utterance goes on from (it began within
    `TurnConfig.continue_ms` of that turn's last voiced frame); set at each speech_start."""
    began_ms: float = 0.0
    """Browser time at which the current utterance began (its first voiced frames)."""
    heard: str = ""
    """The last check's verdict on the current utterance over the agent (app/interruption.py
    `verdict`): what a pending utterance was."""
    audible_ms: float | None = None
    """Browser time at which the reply now playing became audible (its "audible" report)."""
    rechecked_ms: float | None = None
    """The last voiced frame of the last pending utterance checked again at its pause."""
    echo_turns: set[int] = field(default_factory=set)
    """Replies whose own voice came back as speech: later checks do not pause them."""


MIC_STOP = "mic_stop"
VOICE_GONE_MS = 300
"""After a commit, a voice back for less than an utterance lets the held reply go once it
has been quiet this long (a click, a cough): longer than the gaps between a sentence's
words. Any shorter, and on a GPU replies to half questions go out at such gaps and play
over the rest of the question (docs/PERFORMANCE.md)."""
UNHEARD_START_MS = 128
"""Voice that starts an utterance after a commit while none of the reply has gone out: a
short word said on is the user going on. In the labelled set "and" in "… the beach and" is
barely longer than `VadConfig.min_speech_ms`; live it can start no utterance (fewer frames
heard, or some before the commit), and the reply, released at `VOICE_GONE_MS`, is then
heard in the pause after it."""
TICK = "tick"
TICK_S = 0.1
CLOSED = "closed"
Item = MicBytes | MicFrame | PlayerReport | EndOfTurn | AbJob | AbDone | str
JOIN_MAX_S = 20.0
"""A continuation joins at most this much earlier audio: a story told sentence by sentence
is not transcribed again from its start at every pause."""


class Listener:
    """A session's turn-taking thread: frames, reports and verdicts in, decisions out."""

    def __init__(self, session: Session, handle,  # Conversation.handle
                 decode: Callable[[MicBytes], MicFrame] | None = None) -> None:
        """`decode`: a socket's microphone messages (`MicBytes`) into frames, here, so the
        event loop only moves bytes; one it refuses is answered with an error message."""
        self.session, self._handle, self._decode = session, handle, decode
        self.items: queue.Queue = queue.Queue(maxsize=1000)  # many seconds of frames
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"turns-{session.sid[:8]}")
        self.thread.start()

    def put(self, item: Item) -> None:
        try:
            self.items.put_nowait(item)
        except queue.Full:
            log.warning("session %s: turn-taking behind, %s dropped", self.session.sid[:8],
                        type(item).__name__)

    def close(self) -> None:
        self.items.put(CLOSED)

    def _run(self) -> None:
        while True:
            try:
                item = self.items.get(timeout=TICK_S)
            except queue.Empty:
                item = TICK  # no frames (the microphone is off): the A/B may still be due
            if isinstance(item, MicBytes):
                try:
                    item = self._decode(item)
                except ValueError as exc:  # said to the page; the frames after it go on
                    self.session.send_event({"type": "error", "message": str(exc)})
                    continue
            try:
                self._handle(self.session, item)
            except Exception:  # a bug here must not silence the microphone for good
                log.exception("turn-taking failed on %r", item)
            if item == CLOSED:
                return


class Conversation:
    def __init__(self, agent: Agent,
                 on_final: Callable[[TurnMetrics], None] | None = None) -> None:
        """`on_final`: told each turn's records once they are final (`Turn.on_final`)."""
        self.agent = agent
        self.on_final = on_final
        self.detector: TurnDetector = agent.detector
        self._endpointers: dict[str, Endpointer] = {}
        self._listeners: dict[str, Listener] = {}
        self._floors: dict[str, Floor] = {}

    def floor(self, session: Session) -> Floor:
        floor = self._floors.get(session.sid)
        if floor is None:
            floor = self._floors[session.sid] = Floor(
                AnchorQueue(self.agent, session, lambda done: self._post(session, done)))
        return floor

    def open(self, session: Session,
             decode: Callable[[MicBytes], MicFrame] | None = None) -> Listener:
        """The page's audio channel opened: its turn-taking thread (`decode`: Listener's)."""
        listener = self._listeners[session.sid] = Listener(session, self.handle, decode)
        return listener

    def handle(self, session: Session, item: Item) -> None:
        """One item of the session's queue, on its turn-taking thread."""
        f = self.floor(session)
        if isinstance(item, MicFrame):
            self.on_frame(session, item)
        elif isinstance(item, PlayerReport):
            self.on_report(session, item)
        elif isinstance(item, EndOfTurn):
            self.on_verdict(session, item)
        elif isinstance(item, AbJob):
            f.anchor.wait(item)
        elif isinstance(item, AbDone):
            f.anchor.done(item.job)
        elif item == MIC_STOP:
            self.on_mic_stop(session)
        elif item == CLOSED:
            self.on_mic_stop(session)
            f.speaking = 0  # nothing plays without a page
            for turn in list(f.turns.values()):
                turn.player_gone()
            f.anchor.close()
            if self._listeners.get(session.sid) is not None \
                    and self._listeners[session.sid].session is session:
                del self._listeners[session.sid]
            return
        if not isinstance(item, MicFrame) and (latest := self._latest_voice_turn(session)):
            latest.recheck_mic()  # the frames may have stopped coming
        f.anchor.next(self._idle(session))

    # --- the A/B anchor, only while the conversation is idle ---------------------------------
    def _ab_later(self, turn: Turn, messages: list[dict]) -> None:
        """The turn's thread hands its anchor request over (run_turn's `later`)."""
        listener = self._listeners.get(turn.session.sid)
        if listener is None:  # no page: nothing to wait for
            self.agent.measure(turn, self.agent.cfg.anchor, messages, "after-primary")
        else:
            record = self.agent.rival_record(turn, self.agent.cfg.anchor, "after-primary")
            listener.put(AbJob(turn, messages, record=record))

    def _post(self, session: Session, item: Item) -> None:
        listener = self._listeners.get(session.sid)
        if listener is not None:
            listener.put(item)

    def _idle(self, session: Session) -> bool:
        f, endpointer = self.floor(session), self._endpointers.get(session.sid)
        return f.current is None and f.speaking == 0 and \
            (endpointer is None or not endpointer.busy)

    # --- microphone (the session's turn-taking thread) --------------------------------------
    def on_frame(self, session: Session, frame: MicFrame) -> None:
        session.clock.observe(frame.captured_ms, frame.arrived)
        endpointer = self._endpointer(session)
        for event in endpointer.feed(frame):
            self.on_vad(session, event)
        self._release_model(session)
        latest = self._latest_voice_turn(session)  # a commit starts no turn: the same after it
        if latest is not None:  # before a commit sends the audio it holds
            latest.mic_heard(session.clock.to_server(frame.captured_ms))
        self._commit_if_decided(session)
        if latest is not None and latest.committed:
            self._hold_for_voice(latest, endpointer)

    def _latest_voice_turn(self, session: Session) -> Turn | None:
        f = self.floor(session)
        with session.lock:  # the turn in flight, or the newest one if its chain is over
            latest = f.turns[max(f.turns)] if f.turns else None
        return latest if latest is not None and latest.last_voiced_ms is not None else None

    @staticmethod
    def _hold_for_voice(latest: Turn, endpointer: Endpointer) -> None:
        """A committed voice turn's reply waits while the user's voice is back and none of
        it has gone to the page: the verdict may have taken a pause to think for the end
        (a Whisper fragment such as "...a table for it."), and the utterance the voice
        becomes cancels the reply unheard and joins its words (`Floor.continues`); until
        some of it has gone, `UNHEARD_START_MS` of voice make that utterance."""
        quiet = endpointer.quiet_ms
        latest.voice_back(quiet is not None and quiet < VOICE_GONE_MS)
        endpointer.start_after_ms = UNHEARD_START_MS if latest.unheard \
            else endpointer.cfg.min_speech_ms

    def _silence_ms(self, session: Session) -> float:
        endpointer = self._endpointers.get(session.sid)
        return endpointer.silence_ms if endpointer is not None else 0.0

    def _release_model(self, session: Session) -> None:
        """A speculative turn sends its model request once the silence is
        `model_after_ms` long: a short gap between words costs the shared model server
        nothing (ASR at `eager_ms` already ran)."""
        current = self.floor(session).current
        if current is not None and not current.model_go.is_set() \
                and self._silence_ms(session) >= self.agent.cfg.vad.model_after_ms:
            current.stamp("model_go")
            current.model_go.set()

    def _endpointer(self, session: Session) -> Endpointer:
        endpointer = self._endpointers.get(session.sid)
        if endpointer is None:
            endpointer = self._endpointers[session.sid] = Endpointer(self.agent.cfg.vad)
        return endpointer

    def _began(self, session: Session, event: VadEvent) -> None:
        """An utterance started (`speech_start`): when, and the turn it goes on from: the
        newest turn, if it is a committed voice turn and this speech began at most
        `continue_ms` after the silence its verdict asked for (none for finished words; the
        cap for unfinished ones), counted from its last voiced frame: the user's pause,
        whatever the agent did meanwhile."""
        f = self.floor(session)
        f.began_ms, f.heard = event.last_voiced_ms - event.speech_ms, ""
        f.continues = self._continued(session, f.began_ms)
        log.info("speech began at %.0f ms (%s%s)", f.began_ms,  # for a failure's order
                 f"over turn {f.speaking}" if f.speaking else "the agent silent",
                 f", continues turn {f.continues.turn_id}" if f.continues else "")

    def _continued(self, session: Session, began_ms: float) -> Turn | None:
        f, window = self.floor(session), self.agent.cfg.turn.continue_ms
        with session.lock:
            latest = f.turns[max(f.turns)] if f.turns else None
        if not window or latest is None or not latest.committed or latest.cancel.is_set() \
                or latest.metrics.error_stage or latest.audio is None \
                or len(latest.audio) >= JOIN_MAX_S * RATE or latest.last_voiced_ms is None:
            return None
        held = latest.verdict.hold_ms if latest.verdict is not None else 0
        return latest if began_ms - latest.last_voiced_ms <= held + window else None

    # --- the end of the user's turn ----------------------------------------------------------
    def judge(self, turn: Turn, transcript: Transcript, audio: np.ndarray) -> None:
        """A speculative turn's transcript is known (its thread): decide whether the user
        is done and post the verdict to the turn-taking thread (a signal that waits on a
        model decides on a thread of its own)."""
        if turn.committed or not self.detector.on:
            return
        session = turn.session
        with session.lock:
            context = next((m["content"] for m in reversed(session.history)
                            if m["role"] == "assistant" and m["content"]), "")

        def run() -> None:
            result = self.detector.judge(turn.turn_id, transcript.text, audio, context[-300:],
                                         transcript.last_word_s, transcript.close_p)
            self._post(session, result)

        if self.detector.uses <= {"words"}:
            run()  # the words cost nothing: no thread to hop to
        else:  # the model's HTTP call or Smart Turn must not hold up the reply's request
            threading.Thread(target=run, daemon=True, name=f"eot-{turn.turn_id}").start()

    def on_verdict(self, session: Session, result: EndOfTurn) -> None:
        f = self.floor(session)
        current = f.current
        if current is None or current.turn_id != result.turn_id or current.committed \
                or current.cancel.is_set():
            return  # the user went on (or it committed at the cap) before it came
        current.judged(result)
        log.info("turn %s: end of turn by %s (%s): hold %s ms, decided in %s ms",
                 result.turn_id, result.signal, result.detail, result.hold_ms, result.cost_ms)
        self._commit_if_decided(session)

    def _commit_if_decided(self, session: Session) -> None:
        """Commit the speculative turn once the silence is as long as its verdict asks (at
        once for finished words): the reply's audio goes out as soon as it is ready. If
        the user goes on after all, `_hold_for_voice` keeps the reply unheard and the rest
        of the sentence continues the turn (`Floor.continues`)."""
        f = self.floor(session)
        current = f.current
        if current is None or current.committed or current.verdict is None \
                or current.cancel.is_set():
            return
        endpointer = self._endpointers.get(session.sid)
        v = current.verdict
        if endpointer is None or endpointer.silence_ms < v.hold_ms:
            return
        current.commit(f"{v.signal}: {v.detail}")
        endpointer.close()  # speech from here on is a new utterance (it interrupts)
        f.utterance, f.continues = None, None  # no "end" comes for this one

    def on_mic_stop(self, session: Session) -> None:
        f = self.floor(session)
        endpointer = self._endpointers.pop(session.sid, None)
        if endpointer is not None:
            endpointer.reset()
        if f.utterance == "pending":
            self._resume(session)  # no more speech can come to decide it
        f.utterance, f.continues = None, None
        with session.lock:
            current = f.current
            latest = f.turns[max(f.turns)] if f.turns else None
        if current is not None and not current.committed:
            self._drop(session, current)
        if latest is not None and latest.held_for_voice:
            latest.voice_back(False)  # no more voice can come to drop it
        if latest is not None:
            latest.mic_heard(None)  # nor any frame to wait for

    def on_vad(self, session: Session, event: VadEvent) -> None:
        f = self.floor(session)
        with session.lock:
            current = f.current
        speaking = f.speaking != 0 or self._began_under_the_reply(f, event)
        if f.utterance in ("over", "pending", "resumed") \
                or (speaking and f.utterance is None):
            # speech over the agent: nothing but an interruption may come of it
            self._over_agent(session, event)
            if not (event.kind == "pause" and f.utterance == "turn"):
                return  # else the user went on from their last turn: this pause is its own
        if event.kind == "speech_start":
            self._began(session, event)
            self.barge_in(session, cause_ms=event.frame_ms)  # the user goes on: drop it
            session.touch("Listening...")
        elif event.kind == "pause":
            if self.detector.on:  # the verdict commits it; the cap if none comes
                self._endpointer(session).end_after_ms = self.agent.cfg.turn.cap_ms
            self.start(session, "voice", audio=event.audio, last_voiced_ms=event.last_voiced_ms)
        elif event.kind == "resume":
            if current is not None and not current.committed:
                self._drop(session, current)
        elif event.kind == "end":
            f.utterance = None
            reason = f"silence {round(event.frame_ms - event.last_voiced_ms)} ms" + \
                (" (cap)" if self.detector.on else "")
            if current is not None and not current.committed and not current.cancel.is_set():
                current.commit(reason)
            else:
                turn = self.start(session, "voice", audio=event.audio,
                                  last_voiced_ms=event.last_voiced_ms)
                turn.commit(reason)

    def _over_agent(self, session: Session, event: VadEvent) -> None:
        f = self.floor(session)
        if event.kind == "speech_start":
            if f.utterance is None:
                f.utterance, f.utterance_over = "over", f.speaking or f.ended_turn
                self._began(session, event)
        elif event.kind == "end":
            if f.utterance == "pending" and self._went_on(session, event):
                # no pause came before it (speculation off): the end makes the turn
                turn = self.start(session, "voice", audio=event.audio,
                                  last_voiced_ms=event.last_voiced_ms)
                turn.commit("speech over the paused reply")
            elif f.utterance == "pending":
                self._resume(session)
            elif f.utterance in ("over", "resumed") and not f.speaking:
                self._after_the_reply(session, event)
            f.utterance = None
        elif event.kind == "pause" and f.utterance == "pending":
            if f.heard == "backchannel":
                self._resume(session)  # "yeah": let go at once
                f.utterance = "resumed"  # more speech in this utterance is checked afresh
            else:
                # words or a guess wait for the utterance's end: a pause comes after
                # `eager_ms` of silence, shorter than a gap between words (else "What is
                # the | capital of France" resumes the reply at its gap, and it plays out
                # under the question). If the voice went on over the silent reply, the
                # words decide now.
                self._went_on(session, event)
        elif event.kind == "speech_long":
            if f.utterance == "pending" and not self._after_silence(session, event):
                return  # the reply is not silent yet, or this is its echo's tail
            self._check_interruption(session, event)

    @staticmethod
    def _began_under_the_reply(f: Floor, event: VadEvent) -> bool:
        """Whether an utterance whose start is confirmed only now began while the last reply
        was still playing: the echo of its last words. Its `speech_start` needs some voiced
        frames, so it can come after the page's "done" (else the echo of a last word,
        "Fire.", can make a turn of its own)."""
        ended = f.reply_ended_ms
        return event.kind == "speech_start" and f.utterance is None and ended is not None \
            and event.last_voiced_ms - event.speech_ms < ended

    def _after_the_reply(self, session: Session, event: VadEvent) -> None:
        """The reply ended while this utterance, begun over it, went on. It is the user's
        turn if they spoke after the reply's last sample (its echo gone) and the words are
        neither the reply's own nor no words at all. Without this, the echo of a reply's
        last words became a turn the agent answered (the browser test's log)."""
        f = self.floor(session)
        ended = f.reply_ended_ms
        if ended is None or event.last_voiced_ms < ended + ECHO_TAIL_MS:
            return  # all of it under the reply: its echo, or a remark the reply covered
        transcript, _, said = self._hear(session, f.utterance_over, event)
        log.info("speech going on after turn %s ended: %r (score %.2f) -> %s",
                 f.utterance_over, transcript.text, transcript.score, said)
        if said != "words":
            f.continues = None  # an "okay" or a "stop" after the reply is not the question's rest
        if said not in ("echo", "noise"):
            turn = self.start(session, "voice", audio=event.audio,
                              last_voiced_ms=event.last_voiced_ms)
            turn.commit("speech after the reply")

    def _went_on(self, session: Session, event: VadEvent) -> bool:
        """At the pause or end of a pending utterance: whether it became the next turn. It
        does if its voice went on for `barge_in_ms` over the paused, silent reply (the
        user's, not the echo's) and its words, checked again, are words or a command; the
        user going on from their last turn needs no second check. On a busy CPU the check
        at the utterance's second `speech_long` can come before the reply's silence is
        reported, so the rest of a question said over it is decided here. At its end no
        more voice can come, so voice beyond the echo's tail (`ECHO_TAIL_MS`) is checked:
        "was moved to Friday", said on over a reply, can be misread at its first
        `barge_in_ms`, go on for less than that over the silence, and be lost when the
        reply resumes."""
        f = self.floor(session)
        after = ECHO_TAIL_MS if event.kind == "end" else None
        if f.heard not in ("words", "noise") \
                or not self._voiced_after_silence(session, event, after) \
                or f.rechecked_ms == event.last_voiced_ms:  # its pause already checked it
            return False
        f.rechecked_ms = event.last_voiced_ms
        if f.continues is not None and f.heard == "words":
            f.utterance = "turn"  # the user went on from their last turn: this pause is
            self.barge_in(session, cause_ms=event.frame_ms)  # the start of the rest of it
        else:
            self._check_interruption(session, event)
        return f.utterance == "turn"

    def _voiced_after_silence(self, session: Session, event: VadEvent,
                              after_ms: float | None = None) -> bool:
        """Whether the utterance's voice went on for `after_ms` (`barge_in_ms`: as long
        again as the speech that paused it) after the paused reply fell silent: the user's,
        not the reply's echo (with the reply fed back into the page's microphone, an echo's
        last voiced frame can come well after the page reports silence)."""
        silent = self.floor(session).paused_silent_ms
        after = self.agent.cfg.vad.barge_in_ms if after_ms is None else after_ms
        return silent is not None and event.last_voiced_ms >= silent + after

    def _after_silence(self, session: Session, event: VadEvent) -> bool:
        """Whether this speech was captured after the paused reply went silent (the page's
        report) and its echo died away: only that is the user going on over the pause. On a
        busy machine the frames of the check's own ASR time come in late, in one burst."""
        f = self.floor(session)
        silent = f.paused_silent_ms
        return silent is not None and event.frame_ms >= silent + ECHO_TAIL_MS

    def _check_interruption(self, session: Session, event: VadEvent) -> None:
        """Another barge_in_ms of the user's speech over the agent: let the words decide."""
        f = self.floor(session)
        playing = f.turns.get(f.speaking)
        if playing is None:
            return
        pending = f.utterance == "pending"
        if not pending and playing.turn_id not in f.echo_turns:
            self._pause(session, playing.turn_id, event.frame_ms)
        went_on = pending and self._voiced_after_silence(session, event)
        transcript, spoken, said = self._hear(session, playing.turn_id, event, went_on)
        log.info("speech over turn %s (%s ms%s): %r (score %.2f) -> %s; the agent was "
                 "saying %r", playing.turn_id, round(event.speech_ms),
                 ", reply paused" if pending else "", transcript.text, transcript.score,
                 said, spoken[:160])
        f.heard = said
        if said in ("command", "echo"):
            f.continues = None  # about the reply, or the reply itself: not the user going on
        own = f.continues is not None and f.audible_ms is not None \
            and f.began_ms < f.audible_ms  # the user went on before the reply was heard
        if said == "command" or (said == "words" and (pending or own)):
            f.utterance = "turn"  # its pause and end make the next turn
            self.barge_in(session, cause_ms=event.frame_ms)
        elif said == "echo":
            f.echo_turns.add(playing.turn_id)
            f.utterance = "resumed"
            self._resume(session)  # if it was paused
        else:  # words, a hum or a guess: interrupting only if the user goes on
            if not f.paused_turn:
                self._pause(session, playing.turn_id, event.frame_ms)
            f.utterance = "pending"

    def _hear(self, session: Session, turn_id: int, event: VadEvent,
              went_on: bool = False) -> tuple[Transcript, str, str]:
        """ASR of the utterance's last seconds (the words that decide, at one encoder
        window's cost however long the agent's echo has been going on) against what reply
        `turn_id` was saying: the transcript, the reply's text, the verdict (`went_on`:
        the voice went on over the silent, paused reply)."""
        f = self.floor(session)
        reply = f.turns.get(turn_id)
        spoken = " ".join(reply.pieces.values()) if reply is not None else ""
        transcript = self.agent.asr.process(turn_id, event.audio[-CHECK_SAMPLES:])
        return transcript, spoken, verdict(transcript.text, spoken, transcript.score, went_on)

    def _pause(self, session: Session, turn_id: int, cause_ms: float) -> None:
        f = self.floor(session)
        f.paused_turn, f.paused_silent_ms = turn_id, None
        session.send_event({"type": "pause", "turn": turn_id, "cause_ms": cause_ms})

    def _resume(self, session: Session) -> None:
        f = self.floor(session)
        turn_id, f.paused_turn = f.paused_turn, 0
        if turn_id:
            session.send_event({"type": "resume", "turn": turn_id})

    # --- turns ------------------------------------------------------------------------------
    def start(self, session: Session, source: str, audio=None, text: str = "",
              last_voiced_ms: float | None = None, committed: bool = False) -> Turn:
        """Run a turn on its own thread (voice: speculative until committed)."""
        f = self.floor(session)
        turn = self.agent.new_turn(session, source, last_voiced_ms)
        turn.on_final = self.on_final
        if source == "voice" and audio is not None:
            if f.continues is not None and f.continues.audio is not None:
                turn.continues = f.continues  # one utterance, one transcript, one answer
                audio = np.concatenate([f.continues.audio, audio])
                f.anchor.drop(f.continues)
            turn.audio = audio
        for old in f.turns.values():  # only the newest turn's audio can be joined
            if old is not f.continues:
                old.audio = None
        if committed:
            turn.commit(source)
        elif self._silence_ms(session) < self.agent.cfg.vad.model_after_ms:
            turn.model_go.clear()  # `_release_model` sets it once the silence is longer
        with session.lock:
            f.anchor.cut()  # a new turn comes first; the A/B request is sent again
            f.current = turn
            f.turns[turn.turn_id] = turn
            gone = [f.turns.pop(old) for old in list(f.turns)[:-KEEP_TURNS]]
        for old in gone:
            old.player_gone()  # its reports, if any still came, would find no turn
        turn.thread = threading.Thread(target=self._run, args=(turn, audio, text),
                                       daemon=True, name=f"turn-{turn.turn_id}")
        turn.thread.start()
        return turn

    def run_now(self, session: Session, source: str, audio=None, text: str = "") -> Turn:
        """A committed turn on the caller's thread (API uploads); its audio is collected."""
        f = self.floor(session)
        self.barge_in(session)
        turn = self.agent.new_turn(session, source)
        turn.on_final = self.on_final
        turn.collect = []
        turn.commit("upload")
        with session.lock:
            f.current = turn
            f.turns[turn.turn_id] = turn
        self._run(turn, audio, text)
        return turn

    def start_text(self, session: Session, text: str) -> Turn:
        self.barge_in(session)
        return self.start(session, "text", text=text, committed=True)

    def _run(self, turn: Turn, audio, text: str) -> None:
        session = turn.session
        f = self.floor(session)
        try:
            self.agent.run_turn(turn, audio=audio, text=text, heard=self.judge,
                                later=self._ab_later)
        except Exception:  # a bug must not leave the session stuck "Thinking..."
            log.exception("turn %s crashed", turn.turn_id)
            session.touch("Error: the turn failed (see the app's log).")
        finally:
            with session.lock:
                if f.current is turn:
                    f.current = None
            turn.chain_over()

    def _drop(self, session: Session, turn: Turn) -> None:
        f = self.floor(session)
        turn.discard()
        with session.lock:
            if f.current is turn:
                f.current = None

    def barge_in(self, session: Session, cause_ms: float | None = None) -> None:
        """The user speaks over the agent: silence the player first, then cancel."""
        f = self.floor(session)
        with session.lock:
            current, f.current = f.current, None
            playing = f.speaking  # a finished turn may still be playing
            latest = f.turns[max(f.turns)] if f.turns else None
        if latest is not None and latest.held_for_voice:
            latest.drop_held()  # its chain may be over: it is no longer `current`
        f.paused_turn = 0  # the stop ends a pause too
        if playing or (current is not None and current.published):
            session.send_event({"type": "stop", "turn": playing or current.turn_id,
                                "cause_ms": cause_ms})
        if current is not None:
            current.cancel.set()

    # --- the page's player ------------------------------------------------------------------
    def on_report(self, session: Session, report: PlayerReport) -> None:
        f = self.floor(session)
        turn = f.turns.get(report.turn_id)
        log.info("turn %s: the player reports %s at %.0f ms", report.turn_id, report.kind,
                 report.t_ms)  # with the utterances' starts, a failed test's order of events
        if report.kind == "audible" and (turn is None or not turn.cancel.is_set()):
            # a reply already told to stop (the user went on) whose audio was on its way is
            # no agent speaking: speech then is the user's, not speech over the agent
            f.speaking, f.audible_ms = report.turn_id, report.t_ms
        if report.kind in ("done", "stopped") and f.speaking == report.turn_id:
            f.speaking = 0
        if report.kind == "done":
            f.reply_ended_ms, f.ended_turn = report.t_ms, report.turn_id
        if report.kind == "paused" and report.turn_id == f.paused_turn:
            f.paused_silent_ms = report.t_ms
        if turn is not None:
            turn.on_player(report)
