"""Per-browser-session record: the conversation, its metrics and its audio channel. Who
has the floor (the turn-taking state) is the conversation's (app/core/conversation.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.clock import BrowserClock
from app.core.wire import Outbox
from app.messages import SpeechChunk
from app.metrics import TurnMetrics


@dataclass
class Session:
    """Everything one conversation owns. Fields change under `lock`; `version` bumps on change
    and the page is told to fetch what is new."""

    sid: str
    history: list[dict] = field(default_factory=list)
    """Chat messages sent to the model (user/assistant): what the user heard of each reply."""
    history_start: int = 0
    """First message of `history` still sent (see Agent.messages)."""
    chat: list[dict] = field(default_factory=list)
    """What the page shows: the same turns, with notes such as "[interrupted]"."""
    metrics: list[TurnMetrics] = field(default_factory=list)
    heard_language: str | None = None
    """The language of the last words heard from the user (ASR's): the next are heard in it
    first."""
    status: str = "Ready."
    version: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    next_turn: int = 1
    outbox: Outbox | None = None
    """The page's WebSocket while one is open (None for API clients)."""
    clock: BrowserClock = field(default_factory=BrowserClock)
    last_seen: float = 0.0
    rendered: int = -1
    """`version` the page last received."""
    page_cache: dict = field(default_factory=dict, repr=False)
    """What the page last received of each output (only changes are sent)."""
    channel: str = ""
    """How the user reaches this conversation when not through the page: "realtime" (the
    OpenAI Realtime endpoint, app/web/realtime.py). Its turns' records name it in their
    `source` ("realtime-voice"), so /metrics and the export tell the channels apart."""
    instructions: str | None = None
    """The system prompt the client asked for (a Realtime `session.update`); None: the
    persona."""

    def touch(self, status: str | None = None) -> None:
        with self.lock:
            if status is not None:
                self.status = status
            self.version += 1
        outbox = self.outbox
        if outbox is not None:
            outbox.changed()  # the page fetches the change (app/web/ui.py VoiceUi.poll)

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
    def send_audio(self, chunk: SpeechChunk, on_sent=None) -> None:
        """Reply audio to the player (nothing when none listens); `on_sent(t)` as the event
        loop writes it to the socket (app/core/wire.py; a Realtime client's:
        app/web/realtime_out.py)."""
        outbox = self.outbox
        if outbox is not None:
            outbox.send_audio(chunk, on_sent)

    def send_event(self, event: dict) -> None:
        if self.outbox is not None:
            self.outbox.send_json(event)

    def talking(self, on: bool, began_ms: float, silence_ms: float) -> None:
        """The user's voice began (`began_ms`) or ended (`silence_ms` after its last voiced
        frame), as the turn-taking core decided it."""
        if self.outbox is not None:
            self.outbox.talking(on, began_ms, silence_ms)
