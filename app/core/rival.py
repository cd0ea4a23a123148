"""The A/B: each turn's request sent again to the anchor endpoint, timed the way the
primary's is, neither spoken nor kept.

Two ways to send it (`--ab-mode`): `concurrent` at the moment the primary's goes (the two
servers on separate GPUs, nothing shared), `sequential` once the primary turn is over so
the two never share a device. With a page, sequential requests wait in the session's
`AnchorQueue` (app/core/anchor.py) until the conversation is idle; without one they go at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.config import AppConfig
from app.core.turn import Turn
from app.metrics import TurnMetrics, fill_rival
from app.stages.budget import ReplyBudget, within
from app.stages.llm import ChatStream, Endpoint, LlmError, StreamStats
from app.stages.servermetrics import ServerViews

Later = Callable[[Turn, list[dict]], None]


class Rival:
    """The anchor's side of the A/B for every session (one per `Agent`)."""

    def __init__(self, cfg: AppConfig, llm: ChatStream, server_views: ServerViews) -> None:
        self.cfg, self.llm, self.server_views = cfg, llm, server_views

    @property
    def on(self) -> bool:
        return self.cfg.anchor is not None

    def start(self, turn: Turn, messages: list[dict]) -> threading.Thread | None:
        """At the primary's request: the concurrent A/B's thread (None in other modes)."""
        if not self.on or self.cfg.ab_mode != "concurrent":
            return None
        thread = threading.Thread(target=self._when_committed, daemon=True,
                                  name=f"ab-{turn.turn_id}", args=(turn, messages))
        thread.start()
        return thread

    def after(self, turn: Turn, messages: list[dict], started: threading.Thread | None,
              later: Later | None) -> None:
        """The primary turn is over: wait for the concurrent request, or hand the
        sequential one to `later` (the session's queue), or send it now."""
        if started is not None:
            started.join()
        elif self.on:
            if later is not None:
                later(turn, messages)
            else:
                self.measure(turn, messages, "after-primary")

    def _when_committed(self, turn: Turn, messages: list[dict]) -> None:
        if turn.wait_decided():  # a speculation the user talked over is not measured
            self.measure(turn, messages, "concurrent")

    def record(self, turn: Turn, order: str) -> TurnMetrics:
        """The anchor's record for this turn, beside the primary's (shown at once; filled
        when the request has run)."""
        assert self.cfg.anchor is not None
        m = TurnMetrics(turn.turn_id, self.cfg.anchor.name, source=turn.metrics.source,
                        model=self.cfg.anchor.model, order=order)
        turn.add_rival(m)
        return m

    def measure(self, turn: Turn, messages: list[dict], order: str,
                cancel: threading.Event | None = None, m: TurnMetrics | None = None,
                ran_after_ms: float | None = None, retries: int = 0,
                last_try: bool = True, finish: bool = True) -> TurnMetrics:
        """Send the request to the anchor and fill its record.
        `cancel` stops it (default: the turn's own); `m`: the record of an earlier try;
        `last_try`: a cancelled request is not sent again (its record is final then);
        `finish`: a final record is made final here (False: the caller does it,
        `Turn.rival_over`: the A/B queue, once the conversation is idle)."""
        endpoint: Endpoint | None = self.cfg.anchor
        assert endpoint is not None
        session = turn.session
        cancel = cancel or turn.cancel
        m = m or self.record(turn, order)
        if cancel.is_set():
            fill_rival(m, None, None, "", True, ran_after_ms, retries)
            if last_try and finish:
                turn.rival_over(m)
            return m
        session.touch(f"Measuring {endpoint.name}...")
        stats, error = StreamStats(), ""
        before = self.server_views.before(endpoint, session.sid)
        # the same length as the primary's
        budget = ReplyBudget(self.cfg.llm.reply_sentences, self.cfg.llm.reply_seconds)
        try:
            for _ in within(self.llm.stream(endpoint, messages, self.cfg.llm, turn.turn_id,
                                            stats, cancel), budget):
                pass
        except LlmError as exc:
            error = str(exc)
        if budget.over:
            stats.finish_reason = "budget"
        fill_rival(m, stats, self.server_views.after(endpoint, before), error,
                   cancel.is_set(), ran_after_ms, retries)
        if finish and (last_try or not cancel.is_set()):
            turn.rival_over(m)  # final: the page draws it (a cut try is sent again later)
        return m
