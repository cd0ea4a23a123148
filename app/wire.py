"""The page's audio channel on the wire, for the server (app/transport.py) and for scripts
(app/client.py): one WebSocket per page, binary audio both ways, JSON for the rest.

Up: microphone frames (`FRAME_HEADER`, then int16 little-endian PCM, at most 40 ms) and the
player's reports (JSON: audible, paused, stopped, done; mic_stop). Down: reply audio
(`AUDIO_HEADER`, then int16 little-endian PCM), player commands (JSON: stop, pause,
resume, end) and `render`: the session changed, the page may fetch what is new.
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


class Outbox:
    """Messages for one page's WebSocket, put from any thread, sent by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self._render_due: asyncio.TimerHandle | None = None
        self._rendered_at = 0.0

    def changed(self) -> None:
        """The session changed: tell the page, at most once per `RENDER_EVERY_S` (the page
        fetches then, instead of polling: a 4 Hz poll cost the browser ~0.25 s of main
        thread per second, docs/PERFORMANCE.md)."""
        self.loop.call_soon_threadsafe(self._schedule_render)

    def _schedule_render(self) -> None:  # on the loop
        if self._render_due is not None:
            return  # one notice is due already; it will fetch this change too
        wait = max(0.0, self._rendered_at + RENDER_EVERY_S - self.loop.time())
        self._render_due = self.loop.call_later(wait, self._render)

    def _render(self) -> None:  # on the loop
        self._render_due = None
        self._rendered_at = self.loop.time()
        self.queue.put_nowait('{"type": "render"}')

    def send_bytes(self, data: bytes, on_sent=None) -> None:
        """`on_sent(t)` is called on the event loop as it writes the bytes to the socket (`t`:
        perf_counter seconds then)."""
        item = data if on_sent is None else (data, on_sent)
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def send_json(self, event: dict) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, json.dumps(event))
