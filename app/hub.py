"""Sessions by id, so the audio routes find the conversation a page belongs to."""

from __future__ import annotations

import threading
import time
import uuid

from app.session import Session


class SessionHub:
    def __init__(self, max_sessions: int = 200) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.max_sessions = max_sessions

    def register(self, sid: str) -> Session:
        sid = sid or uuid.uuid4().hex
        with self._lock:
            if sid not in self._sessions:
                if len(self._sessions) >= self.max_sessions:
                    oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
                    del self._sessions[oldest.sid]
                self._sessions[sid] = Session(sid)
            session = self._sessions[sid]
        session.last_seen = time.monotonic()
        return session

    def get(self, sid: str) -> Session | None:
        with self._lock:
            return self._sessions.get(sid)

    def __len__(self) -> int:
        return len(self._sessions)
