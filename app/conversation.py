"""Turn-taking: what each endpointer event, typed message and player report does.

Agent silent:
    speech_start   a turn being prepared is cancelled: the user goes on
    pause          a turn starts speculatively with the utterance so far
    resume         the speculation is dropped
    end            the speculation is committed (or a turn starts, speculation off)
Agent speaking (its reply is playing in the page):
    shorter than barge_in_ms   a cough or an "mhm": no turn, the reply goes on
    speech_long    the player pauses (silence first) and ASR checks the words so far:
                   an interruption stops the reply (cut to what was heard) and the
                   utterance becomes the next turn; echo of the agent's own voice, a
                   backchannel or no words resume it, and the utterance is ignored.
                   After one echo verdict in a reply, later checks do not pause it.
No UI text is made here.
"""

from __future__ import annotations

import logging
import threading

from app.interruption import verdict
from app.messages import MicFrame, PlayerReport, VadEvent
from app.pipeline import Agent
from app.session import Session
from app.turn import Turn
from app.vad import Endpointer

log = logging.getLogger(__name__)
KEEP_TURNS = 20  # recent turns kept for late player reports


class Conversation:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._endpointers: dict[str, Endpointer] = {}

    # --- microphone (the session's listener thread) ---------------------------------------
    def on_frame(self, session: Session, frame: MicFrame) -> None:
        session.clock.observe(frame.captured_ms, frame.arrived)
        endpointer = self._endpointers.get(session.sid)
        if endpointer is None:
            endpointer = self._endpointers[session.sid] = Endpointer(self.agent.cfg.vad)
        for event in endpointer.feed(frame):
            self.on_vad(session, event)

    def on_mic_stop(self, session: Session) -> None:
        endpointer = self._endpointers.pop(session.sid, None)
        if endpointer is not None:
            endpointer.reset()
        with session.lock:
            current = session.current
        if current is not None and not current.committed:
            self._drop(session, current)

    def on_vad(self, session: Session, event: VadEvent) -> None:
        with session.lock:
            current = session.current
        speaking = session.speaking != 0
        if session.utterance == "ignored" or (speaking and session.utterance is None):
            # speech over the agent: nothing but an interruption check may come of it
            if event.kind == "speech_long" and session.utterance is None:
                self._check_interruption(session, event)
            elif event.kind == "end":
                session.utterance = None
            return
        if event.kind == "speech_start":
            self.barge_in(session, cause_ms=event.frame_ms)  # the user goes on: drop it
            session.touch("Listening...")
        elif event.kind == "pause":
            self.start(session, "voice", audio=event.audio, last_voiced_ms=event.last_voiced_ms)
        elif event.kind == "resume":
            if current is not None and not current.committed:
                self._drop(session, current)
        elif event.kind == "end":
            session.utterance = None
            if current is not None and not current.committed and not current.cancel.is_set():
                current.commit()
            else:
                turn = self.start(session, "voice", audio=event.audio,
                                  last_voiced_ms=event.last_voiced_ms)
                turn.commit()

    def _check_interruption(self, session: Session, event: VadEvent) -> None:
        """The user has spoken barge_in_ms over the agent: pause, then let the words decide."""
        playing = session.turns.get(session.speaking)
        if playing is None:
            return
        session.utterance = "checking"
        pause = playing.turn_id not in session.echo_turns
        if pause:
            session.send_event({"type": "pause", "turn": playing.turn_id,
                                "cause_ms": event.frame_ms})
        transcript = self.agent.asr.process(playing.turn_id, event.audio)
        spoken = " ".join(playing.pieces.values())
        said = verdict(transcript.text, spoken, transcript.score)
        log.info("speech over turn %s: %r (score %.2f) -> %s; the agent was saying %r",
                 playing.turn_id, transcript.text, transcript.score, said, spoken[:160])
        if said == "interrupt":
            session.utterance = "turn"  # its pause and end make the next turn
            self.barge_in(session, cause_ms=event.frame_ms)
            return
        session.utterance = "ignored"
        if said == "echo":
            session.echo_turns.add(playing.turn_id)
        if pause:
            session.send_event({"type": "resume", "turn": playing.turn_id})

    # --- turns ------------------------------------------------------------------------------
    def start(self, session: Session, source: str, audio=None, text: str = "",  # noqa: ANN001
              last_voiced_ms: float | None = None, committed: bool = False) -> Turn:
        """Run a turn on its own thread (voice: speculative until committed)."""
        turn = self.agent.new_turn(session, source, last_voiced_ms)
        if committed:
            turn.commit()
        with session.lock:
            session.current = turn
            session.turns[turn.turn_id] = turn
            for old in list(session.turns)[:-KEEP_TURNS]:
                del session.turns[old]
        turn.thread = threading.Thread(target=self._run, args=(turn, audio, text),
                                       daemon=True, name=f"turn-{turn.turn_id}")
        turn.thread.start()
        return turn

    def run_now(self, session: Session, source: str, audio=None, text: str = "") -> Turn:  # noqa: ANN001
        """A committed turn on the caller's thread (API uploads); its audio is collected."""
        self.barge_in(session)
        turn = self.agent.new_turn(session, source)
        turn.collect = []
        turn.commit()
        with session.lock:
            session.current = turn
            session.turns[turn.turn_id] = turn
        self._run(turn, audio, text)
        return turn

    def start_text(self, session: Session, text: str) -> Turn:
        self.barge_in(session)
        return self.start(session, "text", text=text, committed=True)

    def _run(self, turn: Turn, audio, text: str) -> None:  # noqa: ANN001
        session = turn.session
        try:
            self.agent.run_turn(turn, audio=audio, text=text)
        except Exception:  # a bug must not leave the session stuck "Thinking..."
            log.exception("turn %s crashed", turn.turn_id)
            session.touch("Error: the turn failed (see the app's log).")
        finally:
            with session.lock:
                if session.current is turn:
                    session.current = None

    def _drop(self, session: Session, turn: Turn) -> None:
        turn.discard()
        with session.lock:
            if session.current is turn:
                session.current = None

    def barge_in(self, session: Session, cause_ms: float | None = None) -> None:
        """The user speaks over the agent: silence the player first, then cancel."""
        with session.lock:
            current, session.current = session.current, None
            playing = session.speaking  # a finished turn may still be playing
        if playing or (current is not None and current.published):
            session.send_event({"type": "stop", "turn": playing or current.turn_id,
                                "cause_ms": cause_ms})
        if current is not None:
            current.cancel.set()

    # --- the page's player ------------------------------------------------------------------
    def on_report(self, session: Session, report: PlayerReport) -> None:
        if report.kind in ("done", "stopped") and session.speaking == report.turn_id:
            session.speaking = 0
        turn = session.turns.get(report.turn_id)
        if turn is not None:
            turn.on_player(report)
