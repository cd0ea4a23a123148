"""The page's audio channel on the server: one WebSocket per page, both directions (the
messages: app/core/wire.py).

The event loop only moves bytes: each microphone message goes as it came to the session's
listener thread (app/core/conversation.py `Listener`), which decodes it (resampled to 16 kHz by
soxr's streaming resampler, continuous across frames, no aliasing) and runs the endpointer
and turn-taking; the player's reports go on the same queue, so turn-taking sees frames and
reports in the order they came.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import numpy as np

from app.core.session import Session
from app.core.wire import FRAME_HEADER, Outbox
from app.messages import RATE, MicBytes, MicFrame, PlayerReport

log = logging.getLogger(__name__)
MAX_RATE = 192000


class FrameDecoder:
    """Binary microphone messages -> 16 kHz `MicFrame`s."""

    def __init__(self) -> None:
        self._resampler = None
        self._rate = 0

    def decode(self, msg: MicBytes) -> MicFrame:
        data = msg.data
        if len(data) < FRAME_HEADER.size + 2 or (len(data) - FRAME_HEADER.size) % 2:
            raise ValueError("malformed microphone frame")
        captured_ms, seq, rate = FRAME_HEADER.unpack_from(data)
        pcm = np.frombuffer(data, dtype="<i2", offset=FRAME_HEADER.size)
        if not 8000 <= rate <= MAX_RATE or len(pcm) > rate // 25:
            raise ValueError(f"microphone frame of {len(pcm)} samples at {rate} Hz: "
                             "at most 40 ms, 8-192 kHz")
        x = pcm.astype(np.float32) / 32768.0
        if rate != RATE:
            x = self._resample(x, rate)
        return MicFrame(seq, x, captured_ms, msg.arrived)

    def _resample(self, x: np.ndarray, rate: int) -> np.ndarray:
        import soxr

        if self._resampler is None or rate != self._rate:
            # LQ: the shortest filter delay of soxr's qualities, and a 12 kHz tone still
            # comes out far below hearing (measured: tests/test_audio.py)
            self._resampler = soxr.ResampleStream(rate, RATE, 1, dtype="float32",
                                                  quality="LQ")
            self._rate = rate
        return self._resampler.resample_chunk(x)


def parse_report(event: dict) -> PlayerReport:
    return PlayerReport(kind=str(event["type"]), turn_id=int(event["turn"]),
                        t_ms=float(event["t_ms"]),
                        received_ms=_opt_float(event.get("received_ms")),
                        heard=tuple(float(x) for x in event.get("heard", ())),
                        cause_ms=_opt_float(event.get("cause_ms")),
                        gap_ms=_opt_float(event.get("gap_ms")),
                        gaps=None if event.get("gaps") is None else int(event["gaps"]))


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)


async def serve_socket(ws, session: Session, conversation) -> None:
    """Run one page's WebSocket until it closes (FastAPI `WebSocket`, app.core.conversation)."""
    from starlette.websockets import WebSocketDisconnect

    outbox = Outbox(asyncio.get_running_loop())
    session.outbox = outbox
    # frames (decoded there) and reports go to its one thread
    listener = conversation.open(session, FrameDecoder().decode)

    async def writer() -> None:
        while True:
            item = await outbox.queue.get()
            if isinstance(item, tuple):  # bytes whose sender waits to hear they went
                data, on_sent = item
                # stamped as the write begins: once the bytes are out the page may have
                # them before this coroutine runs again (on a busy box, after the
                # client's receipt)
                on_sent(time.perf_counter())
                await ws.send_bytes(data)
            elif isinstance(item, bytes):
                await ws.send_bytes(item)
            else:
                await ws.send_text(item)

    send_task = asyncio.create_task(writer())
    await ws.send_text(json.dumps({"type": "ready", "sid": session.sid}))
    try:
        while True:
            msg = await ws.receive()
            if msg.get("type") == "websocket.disconnect":
                break
            if msg.get("bytes") is not None:
                listener.put(MicBytes(msg["bytes"], time.perf_counter()))
            elif msg.get("text") is not None:
                _on_text(msg["text"], session, listener)
    except WebSocketDisconnect:
        pass
    finally:
        send_task.cancel()
        if session.outbox is outbox:
            session.outbox = None
        listener.close()


def _on_text(text: str, session: Session, listener) -> None:  # Listener
    try:
        event = json.loads(text)
        kind = event["type"]
    except (ValueError, KeyError, TypeError):
        log.warning("session %s: malformed message from the page", session.sid[:8])
        return
    if kind == "mic_stop":
        listener.put("mic_stop")
    elif kind in ("audible", "paused", "stopped", "done"):
        try:
            listener.put(parse_report(event))
        except (KeyError, ValueError, TypeError):
            log.warning("session %s: malformed player report %r", session.sid[:8], event)
