"""One Realtime response as the client hears it (app/web/realtime_out.py): its phase, the audio
not sent yet, and what has played, from which the player's reports are made."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

LEAD_S = 0.12
"""Audio the client holds beyond what has played: enough that a late timer leaves no gap,
little enough that a pause or a stop is heard at once."""
DELTA_S = 0.04
"""Audio per `response.output_audio.delta`."""


class Phase(StrEnum):
    """A response, as the client sees it."""

    WAITING = "waiting"
    """response.created: no audio yet (ASR, the model, TTS; or the turn not started)."""
    PLAYING = "playing"
    """Deltas go out as they play; after the core's end, until the last has played."""
    PAUSED = "paused"
    """The core paused it for the user's words: the deltas are held back."""
    OVER = "over"
    """response.done was sent."""


class Speech(StrEnum):
    """The user's speech, as the client was told of it."""

    QUIET = "quiet"
    SPEAKING = "speaking"
    """speech_started was sent."""
    STOPPED = "stopped"
    """speech_stopped was sent; the item waits for the core's commit (or none comes)."""


@dataclass
class Reply:
    response_id: str
    item_id: str
    turn_id: int = 0
    """The core's turn (0: a response.create whose turn has not started yet)."""
    phase: Phase = Phase.WAITING
    ended: bool = False
    """The core's end came: no more audio."""
    user_items: list[tuple[str, str]] = field(default_factory=list)
    """The user items it answers, (id, "input_text" | "input_audio"), when the client made
    them (typed, or committed by hand)."""
    queue: deque = field(default_factory=deque)
    """Audio not sent yet: [piece index, wire bytes, format]."""
    pieces: dict[int, float] = field(default_factory=dict)
    """Piece index -> ms of audio, in the order they came."""
    texts: dict[int, str] = field(default_factory=dict)
    told: list[int] = field(default_factory=list)
    """Pieces whose words went out."""
    sent_ms: float = 0.0
    until: float = 0.0
    """perf_counter time at which the client has played all it was sent."""
    gap_ms: float = 0.0
    gaps: int = 0
    on_sent: Callable[[float], None] | None = None
    heard_ms: float | None = None
    """What the client said it played (its conversation.item.truncate)."""
    truncated_ms: float | None = None
    """Cancelled: the audio it was cut to (conversation.item.truncated)."""
    reason: str = "turn_detected"
    withdrawn: bool = False

    def played_ms(self, now: float) -> float:
        played = self.sent_ms - max(0.0, (self.until - now) * 1000.0)
        return played if self.heard_ms is None else min(played, self.heard_ms)

    def heard(self, played_ms: float) -> tuple[float, ...]:
        """The share of each piece (by index) that played, as the page reports it."""
        if not self.pieces:
            return ()
        shares, start = [0.0] * (max(self.pieces) + 1), 0.0
        for index, ms in self.pieces.items():
            shares[index] = 1.0 if ms <= 0 else max(0.0, min(1.0, (played_ms - start) / ms))
            start += ms
        for index in range(len(shares) - 1):  # a piece TTS failed on: heard if the next was
            if index not in self.pieces and shares[index + 1] > 0:
                shares[index] = 1.0
        return tuple(shares)

    @property
    def words(self) -> str:
        return " ".join(self.texts[i] for i in self.told if self.texts.get(i))
