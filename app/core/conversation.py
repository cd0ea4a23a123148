"""The owner of each session's turn-taking: it turns the microphone's frames, the page
player's reports and the end-of-turn verdicts into events for `app/core/floor.py`'s `step`,
applies them one at a time, and carries out the commands (ASR checks, the player's pause,
resume and stop, starting, committing and dropping turns).

Events are applied under the session's floor lock, one at a time: on the session's
turn-taking thread (`Listener`: frames, reports and verdicts arrive on one queue, in
order), and, for a typed or uploaded turn or a closed page, on the page's thread. `step` is
the only writer of the `Floor`; the turns it names live in `Seat.turns`. No UI text is made
here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from app.core import floor_types as ft
from app.core.anchor import AbDone, AbJob, AnchorQueue
from app.core.eventlog import EventLog
from app.core.floor import step
from app.core.pipeline import Agent
from app.core.seat import CLOSED, JOIN_MAX_S, MIC_STOP, Item, Listener, Seat
from app.core.session import Session
from app.core.turn import Turn
from app.messages import RATE, EndOfTurn, MicBytes, MicFrame, PlayerReport, Transcript, VadEvent
from app.metrics import TurnMetrics
from app.stages.echo import ECHO_MATCH, echo_match, sent_audio
from app.stages.endofturn import TurnDetector
from app.stages.interruption import verdict
from app.stages.vad import Endpointer

log = logging.getLogger(__name__)
KEEP_TURNS = 20  # recent turns kept for late player reports
CHECK_SAMPLES = 4 * RATE  # audio an interruption check reads


class Conversation:
    def __init__(self, agent: Agent,
                 on_final: Callable[[TurnMetrics], None] | None = None) -> None:
        """`on_final`: told each turn's records once they are final (`Turn.on_final`)."""
        self.agent = agent
        self.on_final = on_final
        self.detector: TurnDetector = agent.detector
        self._endpointers: dict[str, Endpointer] = {}
        self._listeners: dict[str, Listener] = {}
        self._seats: dict[str, Seat] = {}

    @property
    def rules(self) -> ft.Rules:
        cfg = self.agent.cfg
        return ft.Rules(detector_on=self.detector.on, cap_ms=cfg.turn.cap_ms,
                     model_after_ms=cfg.vad.model_after_ms, barge_in_ms=cfg.vad.barge_in_ms,
                     continue_ms=cfg.turn.continue_ms, min_speech_ms=cfg.vad.min_speech_ms)

    def floor(self, session: Session) -> Seat:
        seat = self._seats.get(session.sid)
        if seat is None:
            seat = self._seats[session.sid] = Seat(
                AnchorQueue(self.agent.ab, session, lambda done: self._post(session, done)))
        return seat

    def open(self, session: Session,
             decode: Callable[[MicBytes], MicFrame] | None = None) -> Listener:
        """The page's audio channel opened: its turn-taking thread (`decode`: Listener's)."""
        listener = self._listeners[session.sid] = Listener(session, self.handle, decode)
        return listener

    # --- applying events -------------------------------------------------------------------
    def apply(self, session: Session, event: ft.Event) -> None:
        """Apply one event and carry out its commands; the events those produce (a check's
        words, a started turn's id) are applied at once, before the next command."""
        seat = self.floor(session)
        with seat.lock:
            self._apply(session, seat, event)

    def _apply(self, session: Session, seat: Seat, event: ft.Event, follow: bool = False) -> None:
        if self.agent.cfg.record_events is not None:
            if seat.log is None:
                seat.log = EventLog(self.agent.cfg.record_events, session.sid, seat.log_path)
                if seat.log_path is None:
                    seat.log.write(self.rules)  # what a replay applies the events under
                seat.log_path = seat.log.path
            seat.log.write(event, follow)
        talking = seat.state.talking
        seat.state, commands = step(self.rules, seat.state, event)
        if seat.state.talking != talking:  # the Realtime client is told of the user's voice
            session.talking(seat.state.talking, seat.state.began_ms, seat.state.silence_ms)
        for command in commands:
            answer = self._do(session, seat, command)
            if answer is not None:
                self._apply(session, seat, answer, follow=True)

    def _do(self, session: Session, seat: Seat, c: ft.Command) -> ft.Event | None:
        """Carry out one command; the event it produces, if any."""
        if isinstance(c, ft.Check):
            return self._check(session, seat, c)
        if isinstance(c, ft.StartTurn):
            return self._start_voice(session, seat, c)
        turn = seat.turns.get(getattr(c, "turn_id", 0))
        if isinstance(c, ft.PausePlayer):
            session.send_event({"type": "pause", "turn": c.turn_id, "cause_ms": c.cause_ms})
        elif isinstance(c, ft.ResumePlayer):
            session.send_event({"type": "resume", "turn": c.turn_id})
        elif isinstance(c, ft.Interrupt):
            self._interrupt(session, seat, c)
        elif isinstance(c, ft.Commit) and turn is not None:
            turn.commit(c.reason)
        elif isinstance(c, ft.Drop) and turn is not None:
            turn.discard()
        elif isinstance(c, ft.ReleaseModel) and turn is not None:
            turn.stamp("model_go")
            turn.model_go.set()
        elif isinstance(c, ft.AcceptVerdict):
            v = c.verdict
            if (judged := seat.turns.get(v.turn_id)) is not None:
                judged.judged(v)
            log.info("turn %s: end of turn by %s (%s): hold %s ms, decided in %s ms",
                     v.turn_id, v.signal, v.detail, v.hold_ms, v.cost_ms)
        elif isinstance(c, ft.HoldForVoice) and turn is not None:
            turn.voice_back(c.back)
        elif isinstance(c, ft.StartAfter):
            self._endpointer(session).start_after_ms = c.ms
        elif isinstance(c, ft.EndAfter):
            self._endpointer(session).end_after_ms = c.ms
        elif isinstance(c, ft.CloseUtterance):
            if (endpointer := self._endpointers.get(session.sid)) is not None:
                endpointer.close()
        elif isinstance(c, ft.Status):
            session.touch(c.text)
        elif isinstance(c, ft.Let):
            log.info("the utterance makes no turn: %s", c.reason)
        elif isinstance(c, ft.Note):
            log.info("%s", c.text)
        return None

    def handle(self, session: Session, item: Item) -> None:
        """One item of the session's queue, on its turn-taking thread."""
        seat = self.floor(session)
        if isinstance(item, MicFrame):
            self.on_frame(session, item)
        elif isinstance(item, PlayerReport):
            self.on_report(session, item)
        elif isinstance(item, EndOfTurn):
            self.on_verdict(session, item)
        elif isinstance(item, ft.ChainOver):
            self.apply(session, item)
        elif isinstance(item, AbJob):
            seat.anchor.wait(item)
        elif isinstance(item, AbDone):
            seat.anchor.done(item.job)
        elif item == MIC_STOP:
            self.on_mic_stop(session)
        elif item == CLOSED:
            self.on_mic_stop(session, closed=True)
            for turn in list(seat.turns.values()):
                turn.player_gone()
            seat.anchor.close()
            if seat.log is not None:
                seat.log.close()
                seat.log = None
            if self._listeners.get(session.sid) is not None \
                    and self._listeners[session.sid].session is session:
                del self._listeners[session.sid]
            return
        if not isinstance(item, MicFrame) and (latest := self._latest_voice_turn(session)):
            latest.recheck_mic()  # the frames may have stopped coming
        seat.anchor.next(self._idle(session))

    # --- the A/B anchor, only while the conversation is idle ---------------------------------
    def _ab_later(self, turn: Turn, messages: list[dict]) -> None:
        """The turn's thread hands its anchor request over (run_turn's `later`)."""
        listener = self._listeners.get(turn.session.sid)
        if listener is None:  # no page: nothing to wait for
            self.agent.ab.measure(turn, messages, "after-primary")
        else:
            record = self.agent.ab.record(turn, "after-primary")
            listener.put(AbJob(turn, messages, record=record))

    def _post(self, session: Session, item: Item) -> None:
        listener = self._listeners.get(session.sid)
        if listener is not None:
            listener.put(item)

    def _idle(self, session: Session) -> bool:
        endpointer = self._endpointers.get(session.sid)
        return self.floor(session).state.idle and (endpointer is None or not endpointer.busy)

    # --- microphone (the session's turn-taking thread) --------------------------------------
    def on_frame(self, session: Session, frame: MicFrame) -> None:
        session.clock.observe(frame.captured_ms, frame.arrived)
        endpointer = self._endpointer(session)
        for event in endpointer.feed(frame):
            self.on_vad(session, event)
        latest = self._latest_voice_turn(session)  # a commit starts no turn: the same after it
        if latest is not None:  # before a commit sends the audio it holds
            latest.mic_heard(session.clock.to_server(frame.captured_ms))
        self.apply(session, ft.Silence(endpointer.silence_ms, frame.captured_ms,
                                    endpointer.quiet_ms, self._committed(latest)))

    @staticmethod
    def _committed(turn: Turn | None) -> ft.Latest | None:
        if turn is None or not turn.committed:
            return None
        return ft.Latest(turn.turn_id, turn.unheard)

    def on_vad(self, session: Session, event: VadEvent) -> None:
        seat, endpointer = self.floor(session), self._endpointer(session)
        with seat.lock:
            if seat.state.undecided is not None and event.kind == "speech_start":
                self._apply(session, seat, ft.Deadline())
            joinable = self._joinable(session) if event.kind == "speech_start" else None
            self._apply(session, seat, ft.Voice(event, endpointer.silence_ms, joinable))
            if event.kind == "speech_start":
                s = seat.state
                log.info("speech began at %.0f ms (%s%s)", s.began_ms,  # a failure's order
                         f"over turn {s.speaking}" if s.speaking else "the agent silent",
                         f", continues turn {s.continues}" if s.continues else "")

    def _latest_voice_turn(self, session: Session) -> Turn | None:
        with session.lock:  # the turn in flight, or the newest one if its chain is over
            latest = self.floor(session).latest()
        return latest if latest is not None and latest.last_voiced_ms is not None else None

    def _joinable(self, session: Session) -> ft.Joinable | None:
        """The newest turn, if the user's next words may continue it."""
        with session.lock:
            latest = self.floor(session).latest()
        if latest is None or not latest.committed or latest.cancel.is_set() \
                or latest.metrics.error_stage or latest.audio is None \
                or len(latest.audio) >= JOIN_MAX_S * RATE or latest.last_voiced_ms is None:
            return None
        held = latest.verdict.hold_ms if latest.verdict is not None else 0
        return ft.Joinable(latest.turn_id, latest.last_voiced_ms, held)

    def _endpointer(self, session: Session) -> Endpointer:
        endpointer = self._endpointers.get(session.sid)
        if endpointer is None:
            endpointer = self._endpointers[session.sid] = Endpointer(self.agent.cfg.vad)
        return endpointer

    def on_mic_stop(self, session: Session, closed: bool = False) -> None:
        endpointer = self._endpointers.pop(session.sid, None)
        if endpointer is not None:
            endpointer.reset()
        self.apply(session, ft.MicStop(closed))
        latest = self._latest_voice_turn(session)
        if latest is not None and latest.held_for_voice:
            latest.voice_back(False)  # no more voice can come to drop it
        if latest is not None:
            latest.mic_heard(None)  # nor any frame to wait for

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
        self.apply(session, ft.Judged(result))

    # --- carrying out the commands ----------------------------------------------------------
    def _check(self, session: Session, seat: Seat, c: ft.Check) -> ft.Heard:
        """ASR of the utterance's last seconds (the words that decide, at one encoder
        window's cost however long the agent's echo has been going on) against what reply
        `c.turn_id` was saying."""
        reply = seat.turns.get(c.turn_id)
        spoken = " ".join(reply.pieces.values()) if reply is not None else ""
        heard = c.vad.audio[-CHECK_SAMPLES:]
        tr = self.agent.asr.process(c.turn_id, heard)
        # speech that went on past the reply's silence holds the echo from before it: its
        # sound cannot clear it, only its words
        late = c.went_on or c.at == "after"
        match = 0.0 if reply is None or late else echo_match(heard, sent_audio(reply.sent))
        said = verdict(tr.text, spoken, tr.score, c.went_on, match >= ECHO_MATCH)
        log.info("speech over turn %s (%s ms, at its %s%s): %r (score %.2f, sound's echo "
                 "match %.2f) -> %s; the agent was saying %r", c.turn_id, round(c.vad.speech_ms),
                 c.at, ", reply paused" if c.pending else "", tr.text, tr.score, match, said,
                 spoken[:160])
        return ft.Heard(c, said)

    def _start_voice(self, session: Session, seat: Seat, c: ft.StartTurn) -> ft.Started:
        turn = self._new(session, seat, "voice", c.last_voiced_ms)
        audio, continues = c.audio, seat.turns.get(c.continues) if c.continues else None
        if audio is not None:
            if continues is not None and continues.audio is not None:
                turn.continues = continues  # one utterance, one transcript, one answer
                audio = np.concatenate([continues.audio, audio])
                seat.anchor.drop(continues)
            turn.audio = audio
        for old in seat.turns.values():  # only the newest turn's audio can be joined
            if old is not continues and old is not turn:
                old.audio = None
        if c.commit is not None:
            turn.commit(c.commit)
        elif not c.model_go:
            turn.model_go.clear()  # released once the silence is `model_after_ms` long
        self._launch(turn, audio, "")
        return ft.Started(turn.turn_id, c.commit is not None, c.model_go)

    def _new(self, session: Session, seat: Seat, source: str,
             last_voiced_ms: float | None = None) -> Turn:
        turn = self.agent.new_turn(session, source, last_voiced_ms)
        turn.on_final = self.on_final
        with session.lock:
            seat.anchor.cut()  # a new turn comes first; the A/B request is sent again
            seat.turns[turn.turn_id] = turn
            gone = [seat.turns.pop(old) for old in list(seat.turns)[:-KEEP_TURNS]]
        for old in gone:
            old.player_gone()  # its reports, if any still came, would find no turn
        return turn

    def _launch(self, turn: Turn, audio, text: str) -> None:
        turn.thread = threading.Thread(target=self._run, args=(turn, audio, text),
                                       daemon=True, name=f"turn-{turn.turn_id}")
        turn.thread.start()

    def _interrupt(self, session: Session, seat: Seat, c: ft.Interrupt) -> None:
        """Silence the player first, then cancel; a reply held for the voice goes unheard."""
        current = seat.turns.get(c.current) if c.current else None
        with session.lock:
            latest = seat.latest()
        if latest is not None and latest.held_for_voice:
            latest.drop_held()  # its chain may be over: it is no longer `current`
        if c.playing or (current is not None and current.published):
            session.send_event({"type": "stop", "turn": c.playing or current.turn_id,
                                "cause_ms": c.cause_ms})
        if current is not None:
            current.cancel.set()

    # --- turns the page starts --------------------------------------------------------------
    def run_now(self, session: Session, source: str, audio=None, text: str = "") -> Turn:
        """A committed turn on the caller's thread (API uploads); its audio is collected."""
        seat = self.floor(session)
        with seat.lock:
            self._apply(session, seat, ft.Typed())
            turn = self._new(session, seat, source)
            turn.collect = []
            turn.commit("upload")
            self._apply(session, seat, ft.Started(turn.turn_id, True, True))
        self._run(turn, audio, text)
        return turn

    def start_text(self, session: Session, text: str) -> Turn:
        seat = self.floor(session)
        with seat.lock:
            self._apply(session, seat, ft.Typed())
            turn = self._new(session, seat, "text")
            turn.commit("text")
            self._apply(session, seat, ft.Started(turn.turn_id, True, True))
            self._launch(turn, None, text)
        return turn

    def barge_in(self, session: Session) -> None:
        """The page went away or the user took the turn by other means: the agent stops."""
        self.apply(session, ft.Typed())

    def _run(self, turn: Turn, audio, text: str) -> None:
        session = turn.session
        try:
            self.agent.run_turn(turn, audio=audio, text=text, heard=self.judge,
                                later=self._ab_later)
        except Exception:  # a bug must not leave the session stuck "Thinking..."
            log.exception("turn %s crashed", turn.turn_id)
            session.touch("Error: the turn failed (see the app's log).")
        finally:
            if session.sid in self._listeners:
                self._post(session, ft.ChainOver(turn.turn_id))  # in order, with the rest
            else:
                self.apply(session, ft.ChainOver(turn.turn_id))
            turn.chain_over()

    # --- the page's player ------------------------------------------------------------------
    def on_report(self, session: Session, report: PlayerReport) -> None:
        seat = self.floor(session)
        turn = seat.turns.get(report.turn_id)
        log.info("turn %s: the player reports %s at %.0f ms", report.turn_id, report.kind,
                 report.t_ms)  # with the utterances' starts, a failed test's order of events
        self.apply(session, ft.Played(report, turn is not None and turn.cancel.is_set()))
        if turn is not None:
            turn.on_player(report)
