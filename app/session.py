"""Per-browser-session state: the conversation, its metrics and its audio channel."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from app.audio import pcm_b64
from app.messages import SpeechChunk
from app.metrics import TurnMetrics


@dataclass
class TurnHandle:
    turn_id: int
    cancel: threading.Event
    thread: threading.Thread | None = None


@dataclass
class Session:
    """Everything one conversation owns. Fields change under `lock`; `version` bumps on change
    so the page's poller sends only what is new."""

    sid: str
    history: list[dict] = field(default_factory=list)
    """Chat messages sent to the model (user/assistant), partial replies included."""
    history_start: int = 0
    """First message of `history` still sent (see Agent.messages)."""
    chat: list[dict] = field(default_factory=list)
    """What the page shows: the same turns, with notes such as "[interrupted]"."""
    metrics: list[TurnMetrics] = field(default_factory=list)
    status: str = "Ready."
    version: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    audio: queue.Queue = field(default_factory=queue.Queue, repr=False)
    current: TurnHandle | None = None
    next_turn: int = 1
    vad: object | None = None
    listeners: int = 0
    """Browser audio channels open on this session (0 for API clients)."""
    last_seen: float = 0.0
    rendered: int = -1
    """`version` the page last received."""
    _first_sent: dict[int, tuple[float, float]] = field(default_factory=dict, repr=False)
    """turn -> (speech end, first audio written to the browser), perf_counter() times."""

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

    # --- the browser audio channel -------------------------------------------------------
    def send_audio(self, chunk: SpeechChunk, first: bool, speech_end: float | None) -> None:
        self.audio.put({"type": "audio", "turn": chunk.turn_id, "sr": chunk.sample_rate,
                        "pcm": pcm_b64(chunk.pcm), "first": first, "engine": chunk.engine,
                        "_speech_end": speech_end})

    def stop_audio(self, turn_id: int) -> None:
        """Barge-in: tell the player to drop what it queued."""
        self.audio.put({"type": "stop", "turn": turn_id})

    def on_written(self, event: dict) -> None:
        """The SSE route wrote `event` to the browser: stamp the first chunk of a turn."""
        speech_end = event.pop("_speech_end", None)
        if event.get("first") and speech_end is not None:
            self._first_sent[event["turn"]] = (speech_end, time.perf_counter())

    def on_played(self, turn_id: int, browser_delay_ms: float) -> TurnMetrics | None:
        """The page's player started the turn's first audio `browser_delay_ms` after it
        arrived: complete the voice-to-voice figure."""
        stamps = self._first_sent.pop(turn_id, None)
        with self.lock:
            row = self.metrics_for(turn_id)
            if row is None or stamps is None:
                return None
            speech_end, written = stamps
            row.server_v2v_ms = round((written - speech_end) * 1000, 1)
            row.v2v_ms = round(row.server_v2v_ms + max(0.0, browser_delay_ms), 1)
        self.touch()
        return row
