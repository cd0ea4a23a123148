"""The page's audio channel on the wire, for the server (app/web/transport.py) and for scripts
(app/web/client.py): one WebSocket per page, binary audio both ways, JSON for the rest.

Up: microphone frames (`FRAME_HEADER`, then int16 little-endian PCM, at most `rate // 25`
samples) and the player's reports (JSON: audible, paused, stopped, done; mic_stop). Down:
reply audio (`AUDIO_HEADER`, then int16 little-endian PCM), player commands (JSON: stop,
pause, resume, end) and `render`: the session changed, the page may fetch what is new.
"""

from __future__ import annotations

import asyncio
import json
import struct

from app.messages import SpeechChunk

FRAME_HEADER = struct.Struct("<dII")
"""A microphone frame from the page: capture time (browser ms), sequence number, rate."""
AUDIO_HEADER = struct.Struct("<IIII")
"""A reply audio message to the page: turn id, piece index, sample rate, flags."""


def audio_message(chunk: SpeechChunk) -> bytes:
    return AUDIO_HEADER.pack(chunk.turn_id, chunk.index, chunk.sample_rate, 0) + \
        chunk.pcm.astype("<i2").tobytes()


RENDER_EVERY_S = 0.2
"""At most one `render` notice per this much time: a streamed reply changes the session at
every token, and each notice costs the page a round trip and a re-render."""
HOLD_RENDERS_S = 1.0
"""The longest a committed turn holds the page's renders back while its reply's first audio
is on its way (`Outbox.hold_renders`)."""


class Outbox:
    """Messages for one page's WebSocket, put from any thread, sent by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self._render_due: asyncio.TimerHandle | None = None
        self._rendered_at = 0.0
        self._held_until = 0.0

    def changed(self) -> None:
        """The session changed: tell the page, at most once per `RENDER_EVERY_S` (the page
        fetches then, instead of polling: a poll costs the browser a large share of its main
        thread, docs/PERFORMANCE.md)."""
        self.loop.call_soon_threadsafe(self._schedule_render)

    def hold_renders(self, at_most_s: float = HOLD_RENDERS_S) -> None:
        """A turn was committed and its reply's first audio is on its way: no `render`
        notice until audio goes out (`send_bytes`) or `at_most_s` has passed. The fetch and
        re-render a notice sets off ran on the same cores as the reply's first token, piece
        and voice on the 2-core CPU demo, and only once the end of the turn came earlier than
        those did (docs/PERFORMANCE.md); the user's words show with the voice."""
        self.loop.call_soon_threadsafe(self._hold, at_most_s)

    def _hold(self, at_most_s: float) -> None:  # on the loop
        self._held_until = max(self._held_until, self.loop.time() + at_most_s)
        self._reschedule()  # a notice due sooner waits for the audio too

    def _release(self) -> None:  # on the loop
        if self._held_until > self.loop.time():
            self._held_until = 0.0
            self._reschedule()  # a held notice goes now (or at its turn)

    def _reschedule(self) -> None:  # on the loop
        if self._render_due is not None:
            self._render_due.cancel()
            self._render_due = None
            self._schedule_render()

    def _schedule_render(self) -> None:  # on the loop
        if self._render_due is not None:
            return  # one notice is due already; it will fetch this change too
        now = self.loop.time()
        wait = max(0.0, self._rendered_at + RENDER_EVERY_S - now, self._held_until - now)
        self._render_due = self.loop.call_later(wait, self._render)

    def _render(self) -> None:  # on the loop
        self._render_due = None
        self._rendered_at = self.loop.time()
        self.queue.put_nowait('{"type": "render"}')

    def send_bytes(self, data: bytes, on_sent=None) -> None:
        """`on_sent(t)` is called on the event loop as it writes the bytes to the socket (`t`:
        perf_counter seconds then). Reply audio: renders held for it may go."""
        item = data if on_sent is None else (data, on_sent)
        self.loop.call_soon_threadsafe(self._put_audio, item)

    def send_audio(self, chunk: SpeechChunk, on_sent=None) -> None:
        """A piece of reply audio, as the page's audio message (`send_bytes`)."""
        self.send_bytes(audio_message(chunk), on_sent)

    def _put_audio(self, item) -> None:  # on the loop
        self.queue.put_nowait(item)
        self._release()

    def send_json(self, event: dict) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, json.dumps(event))

    def talking(self, on: bool, began_ms: float, silence_ms: float) -> None:
        """The user's voice began or ended: the page has its own VAD meter, nothing to send."""
