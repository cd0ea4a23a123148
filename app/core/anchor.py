"""The A/B anchor's requests of one conversation with a page (sequential A/B).

Each finished turn hands its anchor request over (`AbJob`); it waits until the
conversation is idle (no one speaks, no turn is in flight, no reply plays), the newest
turn's first, so the page's latest turn gets its A/B soonest. A new turn cancels the
request in flight; it is sent again later, up to `AB_TRIES` times, and its record says
when and how often. A turn that a later one continues (the user went on) gives its request
up. Every method runs on the session's turn-taking thread (app/core/conversation.py); a
request runs on a thread of its own and posts `AbDone` back to that queue.

A record that is over (run to its end, or cut on its last try) is made final, and so
drawn by the page, only while the conversation is idle too: a last try is cut by the
user's first voiced frame, and its figures, drawn then, took the page's and the server's
time from the question being asked (the A/B on/off ratio, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.core.rival import Rival
from app.core.session import Session
from app.core.turn import Turn
from app.metrics import TurnMetrics

log = logging.getLogger(__name__)
AB_TRIES = 3  # an anchor request cancelled this often by the user's turns is given up


@dataclass
class AbJob:
    """The A/B anchor's request for a finished turn."""

    turn: Turn
    messages: list[dict]
    ready: float = field(default_factory=time.perf_counter)
    """When the primary turn finished."""
    cancel: threading.Event = field(default_factory=threading.Event)
    tries: int = 0
    record: TurnMetrics | None = None
    dropped: bool = False
    """Not to be sent again: a later turn continues this one (its words answered anew)."""


@dataclass(frozen=True)
class AbDone:
    """An anchor request's thread ended (run to its end, or cancelled)."""

    job: AbJob


class AnchorQueue:
    """One session's anchor requests: those waiting (oldest turn first) and the one in
    flight."""

    def __init__(self, rival: Rival, session: Session,
                 post: Callable[[AbDone], None]) -> None:
        self.rival, self.session, self.post = rival, session, post
        self.waiting: list[AbJob] = []
        self.running: AbJob | None = None
        self.dropped: set[int] = set()
        """Turns whose requests are given up, one arriving late included."""
        self.over: list[AbJob] = []
        """Requests whose records are over, to be made final (drawn) when idle."""

    def wait(self, job: AbJob) -> None:
        """Queue a request in turn order, whenever it arrives (a cut one goes back under
        the newer turns' jobs); a dropped turn's is given up."""
        if job.turn.turn_id in self.dropped:
            self._give_up(job)
            return
        self.waiting.append(job)
        self.waiting.sort(key=lambda j: j.turn.turn_id)

    def next(self, idle: bool) -> None:
        """The conversation changed: cut the request in flight if it is no longer idle,
        else send the newest waiting one (older ones run in the longer quiet spells, a
        conversation's end at the latest). Records that are over are drawn first."""
        if idle and self.over:
            for job in self.over:
                job.turn.rival_over(job.record, "Ready.")
            self.over.clear()
        if self.running is not None:
            if not idle:
                self.running.cancel.set()  # the user's turn comes first; sent again later
            return
        if not self.waiting or not idle:
            return
        job = self.running = self.waiting.pop()
        job.tries += 1
        job.cancel = threading.Event()
        log.info("turn %s: the A/B anchor's request sent (try %s)", job.turn.turn_id, job.tries)
        threading.Thread(target=self._send, args=(job,), daemon=True,
                         name=f"ab-{job.turn.turn_id}").start()

    def _send(self, job: AbJob) -> None:
        try:
            job.record = self.rival.measure(
                job.turn, job.messages, "after-primary",
                cancel=job.cancel, m=job.record, retries=job.tries - 1,
                ran_after_ms=round((time.perf_counter() - job.ready) * 1000, 1),
                last_try=job.tries >= AB_TRIES, finish=False)
        finally:
            self.post(AbDone(job))

    def cut(self) -> None:
        """A new turn starts: the request in flight stops (it is sent again later)."""
        if self.running is not None:
            self.running.cancel.set()

    def done(self, job: AbJob) -> None:
        """A request's thread ended: a cut one waits again, unless its tries are spent."""
        if self.running is job:
            self.running = None
        last = job.tries >= AB_TRIES
        error = job.record.error[:120] if job.record is not None else "no record"
        log.info("turn %s: the A/B anchor's request %s (try %s)%s", job.turn.turn_id,
                 "cut" if job.cancel.is_set() else "ran", job.tries,
                 f": {error}" if error else "")
        if job.dropped and not last and job.record is not None and job.record.cancelled:
            self._give_up(job)  # cut, not on its last try: its record is not closed yet
        elif job.cancel.is_set() and not last and not job.dropped:
            self.wait(job)
        else:
            self._over(job)

    def _over(self, job: AbJob) -> None:
        if job.record is not None:
            self.over.append(job)

    def drop(self, turn: Turn) -> None:
        """The turn's request will not be sent: its words are answered again, with the
        rest, by the turn that continues it. Its record says cancelled."""
        self.dropped.add(turn.turn_id)
        if self.running is not None and self.running.turn is turn:
            self.running.dropped = True  # its record is closed when its thread ends
            self.running.cancel.set()
        for job in [j for j in self.waiting if j.turn is turn]:
            self.waiting.remove(job)
            self._give_up(job)

    def close(self) -> None:
        """The page went away: nothing more is sent; what is over is final (no page draws
        it)."""
        self.cut()
        self.waiting.clear()
        for job in self.over:
            job.turn.rival_over(job.record)
        self.over.clear()

    def _give_up(self, job: AbJob) -> None:
        job.cancel.set()
        job.record = self.rival.measure(job.turn, job.messages,
                                        "after-primary", cancel=job.cancel, m=job.record,
                                        retries=max(0, job.tries - 1), last_try=True,
                                        finish=False)
        self._over(job)
