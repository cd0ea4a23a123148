"""A session's turn-taking thread (`Listener`) and what holds its state (`Seat`): the
queue that puts the microphone's frames, the player's reports and the verdicts in one order,
and the `Floor` that only `app.core.floor.step` writes, with the turns it names."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.core.anchor import AbDone, AbJob, AnchorQueue
from app.core.eventlog import EventLog
from app.core.floor_types import ChainOver, Floor
from app.core.session import Session
from app.core.turn import Turn
from app.messages import EndOfTurn, MicBytes, MicFrame, PlayerReport

log = logging.getLogger("app.core.conversation")


MIC_STOP = "mic_stop"
TICK = "tick"
TICK_S = 0.1
CLOSED = "closed"
Item = MicBytes | MicFrame | PlayerReport | EndOfTurn | ChainOver | AbJob | AbDone | str
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


@dataclass
class Seat:
    """One session's turn-taking: the state `step` writes, and what its commands act on."""

    anchor: AnchorQueue
    """The A/B anchor's requests, sent while the conversation is idle."""
    state: Floor = field(default_factory=Floor)
    turns: dict[int, Turn] = field(default_factory=dict)
    """Recent turns by id, for the player's reports (written under the session's lock)."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Held while an event is applied: one at a time, in order."""
    log: EventLog | None = None
    """The events applied, as JSON lines (`--record-events`)."""
    log_path: Path | None = None

    # the state, read by name (tests, logs)
    def __getattr__(self, name: str):
        if name.startswith("_") or name not in Floor.__dataclass_fields__:
            raise AttributeError(name)
        return getattr(self.state, name)

    @property
    def current(self) -> Turn | None:
        return self.turns.get(self.state.current) if self.state.current else None

    @property
    def continues(self) -> Turn | None:
        return self.turns.get(self.state.continues) if self.state.continues else None

    def __setattr__(self, name: str, value) -> None:
        if name in Floor.__dataclass_fields__:
            raise AttributeError(f"{name} is the Floor's: only app.core.floor.step writes it")
        super().__setattr__(name, value)

    def latest(self) -> Turn | None:
        return self.turns[max(self.turns)] if self.turns else None
