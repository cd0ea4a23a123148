"""A caller of the app's OpenAI Realtime endpoint through the openai SDK, for the tests and
the benchmarks: it speaks a 16 kHz clip as a microphone would (20 ms appends at the pace of
speech, after `LEAD_S` of silence, and silence after it), and keeps every event the server
sends with the client time it arrived.

    async with AsyncOpenAI(base_url=url + "v1", api_key=key).realtime.connect(model="m") as c:
        caller = Caller(c)
        await caller.say(speech16k, until=lambda: caller.of("response.done"))

Times are this process's `perf_counter` in ms, as `app.web.client.VoiceClient`'s, and the clip's
last voiced sample goes out at `stream_start_ms + (LEAD_S + speech_end_s(clip)) * 1000`, as
the page socket's scripted client sends it: the two are measured the same way.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable

import numpy as np

from app.stages.audio import resample
from app.web.client import FRAME_MS, LEAD_S
from app.web.realtime_audio import PCM, Format


def now_ms() -> float:
    return time.perf_counter() * 1000.0


def speech_end_s(x: np.ndarray) -> float:
    """Where a 16 kHz clip's speech ends: its last sample above -40 dBFS."""
    loud = np.nonzero(np.abs(x) > 0.01)[0]
    return (loud[-1] + 1) / 16000 if len(loud) else len(x) / 16000


def frames(speech16k: np.ndarray, fmt: Format = PCM, lead_s: float = 0.0) -> list[str]:
    """16 kHz float speech, after `lead_s` of silence, as base64 appends of `FRAME_MS`."""
    x = np.concatenate([np.zeros(int(lead_s * 16000), np.float32), speech16k.astype(np.float32)])
    pcm = np.clip(np.round(resample(x, 16000, fmt.rate) * 32767), -32768, 32767).astype(np.int16)
    data, n = fmt.from_pcm16(pcm), fmt.rate * FRAME_MS // 1000 * fmt.width
    return [base64.b64encode(data[i:i + n]).decode() for i in range(0, len(data) - n + 1, n)]


class Caller:
    """One connection's events, as they came: (client ms, event)."""

    def __init__(self, conn, fmt: Format = PCM) -> None:
        self.conn, self.fmt = conn, fmt
        self.events: list[tuple[float, object]] = []
        self.stream_start_ms = 0.0
        self._task = asyncio.create_task(self._receive())

    async def _receive(self) -> None:
        async for event in self.conn:
            self.events.append((now_ms(), event))

    def of(self, kind: str, since_ms: float = 0.0) -> list:
        return [e for t, e in self.events if e.type == kind and t >= since_ms]

    def first(self, kind: str, since_ms: float = 0.0) -> tuple[float, object] | None:
        return next(((t, e) for t, e in self.events if e.type == kind and t >= since_ms), None)

    def completed(self, since_ms: float = 0.0) -> list:
        """The responses that played to their end (a turn the user's next words continued
        is cancelled before any of it is heard: its response is done, but cancelled)."""
        return [e.response for e in self.of("response.done", since_ms)
                if e.response.status == "completed"]

    def first_audio(self, response_id: str) -> float | None:
        """When the response's first audio arrived (client ms)."""
        return next((t for t, e in self.events if e.type == "response.output_audio.delta"
                     and e.response_id == response_id), None)

    async def wait(self, check: Callable[[], object], timeout_s: float = 60.0) -> object:
        """Until `check()` is true (returned), or TimeoutError with the last events."""
        deadline = time.monotonic() + timeout_s
        while not (result := check()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout_s:.0f} s; last events: "
                                   f"{[e.type for _, e in self.events[-12:]]}")
            await asyncio.sleep(0.02)
        return result

    async def say(self, speech16k: np.ndarray, until: Callable[[], object],
                  timeout_s: float = 90.0, over: np.ndarray | None = None,
                  over_after_ms: float = 0.0) -> float:
        """Speak at the microphone's pace, then send silence until `until()` is true.
        `over`: words said `over_after_ms` after the reply's first audio came (a barge-in).
        Returns the client time the clip's last voiced sample went out."""
        spoken = frames(speech16k, self.fmt, lead_s=LEAD_S)
        quiet = frames(np.zeros(16000 * FRAME_MS // 1000, np.float32), self.fmt)[0]
        start = self.stream_start_ms = now_ms()
        deadline, k = time.monotonic() + timeout_s, 0
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no end within {timeout_s:.0f} s; last events: "
                                   f"{[e.type for _, e in self.events[-12:]]}")
            heard = self.first("response.output_audio.delta", start)
            if over is not None and k >= len(spoken) and heard is not None \
                    and now_ms() >= heard[0] + over_after_ms:
                spoken += [quiet] * (k - len(spoken)) + frames(over, self.fmt)
                over = None
            due = start + (k + 1) * FRAME_MS
            await asyncio.sleep(max(0.0, (due - now_ms()) / 1000))
            await self.conn.input_audio_buffer.append(audio=spoken[k] if k < len(spoken)
                                                      else quiet)
            k += 1
        return start + (LEAD_S + speech_end_s(speech16k)) * 1000

    async def close(self) -> None:
        self._task.cancel()
