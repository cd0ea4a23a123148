"""The page's audio channel on the wire, for the server (app/transport.py) and for scripts
(app/client.py): one WebSocket per page, binary audio both ways, JSON for the rest.

Up: microphone frames (`FRAME_HEADER`, then int16 little-endian PCM, at most 40 ms) and the
player's reports (JSON: audible, paused, stopped, done; mic_stop). Down: reply audio
(`AUDIO_HEADER`, then int16 little-endian PCM) and player commands (JSON: stop, pause,
resume, end).
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


class Outbox:
    """Messages for one page's WebSocket, put from any thread, sent by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def send_bytes(self, data: bytes) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, data)

    def send_json(self, event: dict) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, json.dumps(event))
