"""Per-browser-session state: the conversation, its metrics and its audio channel."""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.clock import BrowserClock
from app.messages import SpeechChunk
from app.metrics import TurnMetrics

if TYPE_CHECKING:
    from app.transport import Outbox
    from app.turn import Turn

AUDIO_HEADER = struct.Struct("<IIII")
"""A reply audio message to the page: turn id, piece index, sample rate, flags; then int16
little-endian PCM."""


@dataclass
class Session:
    """Everything one conversation owns. Fields change under `lock`; `version` bumps on change
    so the page's poller sends only what is new."""

    sid: str
    history: list[dict] = field(default_factory=list)
    """Chat messages sent to the model (user/assistant): what the user heard of each reply."""
    history_start: int = 0
    """First message of `history` still sent (see Agent.messages)."""
    chat: list[dict] = field(default_factory=list)
    """What the page shows: the same turns, with notes such as "[interrupted]"."""
    metrics: list[TurnMetrics] = field(default_factory=list)
    status: str = "Ready."
    version: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    current: Turn | None = None
    """The turn being prepared or spoken (at most one)."""
    next_turn: int = 1
    outbox: Outbox | None = None
    """The page's WebSocket while one is open (None for API clients)."""
    clock: BrowserClock = field(default_factory=BrowserClock)
    speaking: int = 0
    """Turn whose audio the page is playing (0: silent)."""
    last_seen: float = 0.0
    rendered: int = -1
    """`version` the page last received."""
    page_cache: dict = field(default_factory=dict, repr=False)
    """What the page last received of each output (the poller sends only changes)."""
    turns: dict[int, Turn] = field(default_factory=dict, repr=False)
    """Recent turns by id, for the player's reports."""
    utterance: str | None = None
    """What the user's current utterance is while the agent speaks: None (none, or begun
    while the agent was silent), "over" (begun over the reply, undecided), "pending" (the
    reply is paused: interrupting if the user goes on), "resumed" (let go: echo, or short;
    later speech is checked again) or "turn" (it interrupted: it becomes the next turn).
    See app/conversation.py."""
    utterance_over: int = 0
    """The reply the current utterance began over."""
    reply_ended_ms: float | None = None
    """Browser time at which the last reply played out (the page's "done")."""
    paused_turn: int = 0
    """Turn whose reply the page holds paused for the user's speech (0: none)."""
    paused_silent_ms: float | None = None
    """Browser time at which that pause went silent (the page's report; None until then)."""
    echo_turns: set[int] = field(default_factory=set, repr=False)
    """Replies whose own voice came back as speech: later checks do not pause them."""

    def touch(self, status: str | None = None) -> None:
        with self.lock:
            if status is not None:
                self.status = status
            self.version += 1

    def new_turn_id(self) -> int:
        with self.lock:
            turn_id, self.next_turn = self.next_turn, self.next_turn + 1
            return turn_id

    def metrics_for(self, turn_id: int, endpoint: str = "primary") -> TurnMetrics | None:
        for row in reversed(self.metrics):
            if row.turn_id == turn_id and row.endpoint == endpoint:
                return row
        return None

    def __deepcopy__(self, memo: dict) -> Session:
        return self  # live state (locks, queues, threads) is shared, never copied

    # --- the page's audio channel --------------------------------------------------------
    def send_audio(self, chunk: SpeechChunk) -> None:
        """Reply audio to the page's player (nothing when no page listens)."""
        outbox = self.outbox
        if outbox is None:
            return
        self.speaking = chunk.turn_id
        pcm = chunk.pcm.astype("<i2").tobytes()
        outbox.send_bytes(AUDIO_HEADER.pack(chunk.turn_id, chunk.index, chunk.sample_rate, 0)
                          + pcm)

    def send_event(self, event: dict) -> None:
        if self.outbox is not None:
            self.outbox.send_json(event)
