"""Sessions by id, so the audio routes find the conversation a page belongs to, and the
slots for live conversations (`--max-sessions`).

Session ids are issued here, never taken from a client: an id is an unguessable secret
handed only to a page that passed the login (Gradio's `demo.load`) or to a script that
sent the credentials (`POST /agent/session`), and the audio channel and the export
routes accept only ids issued here (app/web/server.py).

A live session holds a slot from its creation until it goes away: a page when Gradio says
the tab closed (its unload event), a script when its audio channel closes, or when it does
not open one within `CONNECT_S`. Its record stays for the export. A page refused for want
of a slot gets a one-use ticket instead of an id: the audio channel answers it with the
spoken notice and closes.
"""

from __future__ import annotations

import math
import secrets
import threading
import time

from app.core.session import Session

BUSY = "The agent is busy; please try again shortly."
RETRY_AFTER_S = 10
"""What a refused client is told to wait: a conversation lasts minutes, a page's close is
seen within a second."""
CONNECT_S = 30.0
"""A script's session that opens no audio channel within this is released."""
TICKET_S = 60.0


class Busy(Exception):
    """Every slot for a live conversation is taken."""

    def __init__(self) -> None:
        super().__init__(BUSY)


class SessionHub:
    def __init__(self, max_live: int = 0, keep: int = 200) -> None:
        """`max_live`: live sessions at once (0: no limit); `keep`: session records kept
        (the least recently seen one that is not live makes room)."""
        self._sessions: dict[str, Session] = {}
        self._live: dict[str, float] = {}
        """Live sessions' ids -> the time by which a script must open its channel."""
        self._scripts: set[str] = set()
        self._tickets: dict[str, float] = {}
        self._lock = threading.Lock()
        self.max_live = max_live
        self.keep = max(keep, max_live)
        self.refused = 0
        """Sessions refused for want of a slot, since the start."""

    def create(self, script: bool = False) -> Session:
        """A new live session under a fresh secret id (`script`: for a client of the audio
        channel, released when it closes). Raises `Busy` when every slot is taken."""
        session = Session(secrets.token_urlsafe(18))
        session.last_seen = now = time.monotonic()
        with self._lock:
            self._take_slot()
            if len(self._sessions) >= self.keep:
                idle = [s for s in self._sessions.values() if s.sid not in self._live]
                oldest = min(idle or self._sessions.values(), key=lambda s: s.last_seen)
                del self._sessions[oldest.sid]
                self._live.pop(oldest.sid, None)
                self._scripts.discard(oldest.sid)
            self._sessions[session.sid] = session
            self._live[session.sid] = now + CONNECT_S if script else math.inf
            if script:
                self._scripts.add(session.sid)
        return session

    def get(self, sid: str) -> Session | None:
        """The session issued under `sid` (live or not), or None."""
        with self._lock:
            session = self._sessions.get(sid)
        if session is not None:
            session.last_seen = time.monotonic()
        return session

    def attach(self, sid: str) -> Session | None:
        """The audio channel opens under `sid`: the session (None: never issued). One that
        went away takes a slot again, or raises `Busy`."""
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if sid not in self._live:
                self._take_slot()
            self._live[sid] = math.inf
        session.last_seen = time.monotonic()
        return session

    def detach(self, sid: str) -> None:
        """The audio channel under `sid` closed: a script's conversation is over (a page
        reconnects after a network blip; it ends when the tab closes: `release`)."""
        with self._lock:
            if sid in self._scripts:
                self._live.pop(sid, None)

    def release(self, sid: str) -> None:
        """The conversation went away: its slot is free; its record stays."""
        with self._lock:
            self._live.pop(sid, None)

    @property
    def live(self) -> int:
        """Sessions holding a slot."""
        with self._lock:
            self._expire()
            return len(self._live)

    def ticket(self) -> str:
        """A one-use credential for a refused page's audio channel (the spoken notice)."""
        ticket, now = secrets.token_urlsafe(18), time.monotonic()
        with self._lock:
            self._tickets = {t: at for t, at in self._tickets.items() if now - at < TICKET_S}
            self._tickets[ticket] = now
        return ticket

    def redeem(self, ticket: str) -> bool:
        """Whether `ticket` was issued here within `TICKET_S` and not used yet."""
        with self._lock:
            at = self._tickets.pop(ticket, None)
        return at is not None and time.monotonic() - at < TICKET_S

    def _take_slot(self) -> None:
        """Under the lock: raise `Busy` (counted) when no slot is free."""
        self._expire()
        if self.max_live and len(self._live) >= self.max_live:
            self.refused += 1
            raise Busy

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [sid for sid, by in self._live.items() if by < now]:
            del self._live[sid]

    def __len__(self) -> int:
        return len(self._sessions)
