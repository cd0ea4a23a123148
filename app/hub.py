"""Sessions by id, so the audio routes find the conversation a page belongs to.

Session ids are issued here, never taken from a client: an id is an unguessable secret
handed only to a page that passed the login (Gradio's `demo.load`) or to a script that
sent the credentials (`POST /agent/session`), and the audio channel and the export
routes accept only ids issued here (app/server.py).
"""

from __future__ import annotations

import secrets
import threading
import time

from app.session import Session


class SessionHub:
    def __init__(self, max_sessions: int = 200) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.max_sessions = max_sessions

    def create(self) -> Session:
        """A new session under a fresh secret id; the least recently seen one makes room."""
        session = Session(secrets.token_urlsafe(18))
        session.last_seen = time.monotonic()
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
                del self._sessions[oldest.sid]
            self._sessions[session.sid] = session
        return session

    def get(self, sid: str) -> Session | None:
        """The session issued under `sid`, or None."""
        with self._lock:
            session = self._sessions.get(sid)
        if session is not None:
            session.last_seen = time.monotonic()
        return session

    def __len__(self) -> int:
        return len(self._sessions)
