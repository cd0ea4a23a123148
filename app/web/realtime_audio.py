"""Audio of the Realtime endpoint (app/web/realtime.py), both ways, in the protocol's formats:
`audio/pcm` (16-bit little-endian at 24 kHz, the only rate the protocol allows) and G.711
`audio/pcmu` and `audio/pcma` (8 kHz, telephony).

In: a client's appended audio is cut into the page's microphone frames (app/core/wire.py
`FRAME_HEADER`, at the format's own rate), so the turn-taking thread decodes and resamples
them with the page's own decoder (app/web/transport.py `FrameDecoder`). A Realtime client sends
no capture times; `InputClock` stamps them. Out: each synthesised piece is resampled
(app/stages/audio.py) to the format's rate and encoded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from app.core.wire import FRAME_HEADER
from app.stages.audio import resample

FRAME_MS = 20
"""The microphone frames the client's audio is cut into: the page's own length."""


class FormatError(ValueError):
    """A format the endpoint does not speak; the message says which ones it does."""


@dataclass(frozen=True)
class Format:
    type: str
    rate: int

    @property
    def width(self) -> int:
        """Bytes per sample on the wire."""
        return 2 if self.type == "audio/pcm" else 1

    def ms(self, n_bytes: int) -> float:
        return n_bytes / self.width * 1000.0 / self.rate

    def to_pcm16(self, data: bytes) -> bytes:
        """Wire bytes -> int16 little-endian PCM at `rate`."""
        if self.type == "audio/pcm":
            if len(data) % 2:
                raise FormatError("audio/pcm is 16-bit: an odd number of bytes came")
            return data
        table = ulaw_to_pcm() if self.type == "audio/pcmu" else alaw_to_pcm()
        return table[np.frombuffer(data, np.uint8)].astype("<i2").tobytes()

    def from_pcm16(self, pcm: np.ndarray) -> bytes:
        """int16 PCM at `rate` -> wire bytes."""
        if self.type == "audio/pcm":
            return pcm.astype("<i2").tobytes()
        table = pcm_to_ulaw() if self.type == "audio/pcmu" else pcm_to_alaw()
        return table[pcm.astype(np.int32) + 32768].tobytes()

    def to_json(self) -> dict:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" \
            else {"type": self.type}


PCM = Format("audio/pcm", 24000)
FORMATS = {f.type: f for f in (PCM, Format("audio/pcmu", 8000), Format("audio/pcma", 8000))}


def parse_format(value: object) -> Format:
    """The protocol's format object ({"type": "audio/pcm", "rate": 24000}, ...)."""
    if not isinstance(value, dict) or value.get("type") not in FORMATS:
        raise FormatError(f"audio format {value!r}: use one of {', '.join(FORMATS)}")
    fmt = FORMATS[value["type"]]
    rate = value.get("rate")
    if rate is not None and rate != fmt.rate:
        raise FormatError(f"{fmt.type} is {fmt.rate} Hz only (asked: {rate!r})")
    return fmt


def encode_reply(pcm: np.ndarray, rate: int, fmt: Format) -> bytes:
    """A synthesised piece (int16 at `rate`) in the client's format."""
    x = resample(pcm.astype(np.float32) / 32768.0, rate, fmt.rate)
    return fmt.from_pcm16(np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16))


# --- G.711: the ITU's tables, as the reference C code computes them ---------------------------
@cache
def ulaw_to_pcm() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 7, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


@cache
def alaw_to_pcm() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent, mantissa = (a >> 4) & 7, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8,
                         ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


@cache
def pcm_to_ulaw() -> np.ndarray:
    """Every int16 value (offset by 32768) -> its mu-law byte."""
    x = np.arange(-32768, 32768, dtype=np.int32) >> 2  # 14 bits
    mask = np.where(x < 0, 0x7F, 0xFF)
    x = np.minimum(np.abs(x), 8159) + 0x21
    seg = np.searchsorted(np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF]), x)
    value = (seg << 4) | ((x >> (seg + 1)) & 0x0F)
    return (np.where(seg >= 8, 0x7F, value) ^ mask).astype(np.uint8)


@cache
def pcm_to_alaw() -> np.ndarray:
    """Every int16 value (offset by 32768) -> its A-law byte."""
    x = np.arange(-32768, 32768, dtype=np.int32) >> 3  # 13 bits
    mask = np.where(x >= 0, 0xD5, 0x55)
    x = np.where(x >= 0, x, -x - 1)
    seg = np.searchsorted(np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF]), x)
    low = np.where(seg < 2, x >> 1, x >> np.maximum(seg, 1)) & 0x0F
    return (np.where(seg >= 8, 0x7F, (seg << 4) | low) ^ mask).astype(np.uint8)


# --- the client's audio as microphone frames ---------------------------------------------------
class InputClock:
    """Capture times for audio that comes without them, on the server's clock: the frames
    of one append end at its arrival, spaced by their length, and never before the frame
    before them. A frame is then never stamped later than it arrived: stamped ahead, the
    turn would take the microphone for behind and hold its first audio until the frames
    caught up with the stamps. Audio sent faster than it plays is squeezed on this clock;
    the endpointer counts silence in samples, so only the stamps are. The clock also knows
    each time's place in the stream, which the protocol's `audio_start_ms` /
    `audio_end_ms` count (milliseconds of audio appended)."""

    def __init__(self) -> None:
        self.end_ms = -math.inf
        """Capture time of the newest frame's last sample."""
        self.total_ms = 0.0
        """Audio appended so far."""

    def place(self, arrived_end_ms: float, duration_ms: float) -> float:
        """A frame that arrived as if it ended at `arrived_end_ms`: its capture time."""
        self.end_ms = max(arrived_end_ms, self.end_ms)
        self.total_ms += duration_ms
        return self.end_ms

    def position(self, t_ms: float) -> int:
        """Where capture time `t_ms` lies in the stream, in ms of audio."""
        if self.end_ms == -math.inf:
            return 0
        return int(max(0.0, min(self.total_ms, self.total_ms - (self.end_ms - t_ms))))


class InputFrames:
    """A client's appended audio as the page's microphone messages: whole `FRAME_MS`
    frames (a part frame waits for the next append), stamped by an `InputClock`."""

    def __init__(self) -> None:
        self.clock = InputClock()
        self._rest = b""
        self._rate = 0
        self._seq = 0

    def cut(self, pcm16: bytes, rate: int, arrived_ms: float) -> list[bytes]:
        """int16 PCM at `rate` that arrived at `arrived_ms` -> frames (FRAME_HEADER + PCM)."""
        if rate != self._rate:  # the format changed: a part frame of the old one is dropped
            self._rest, self._rate = b"", rate
        data = self._rest + pcm16
        step = rate * FRAME_MS // 1000 * 2
        n = len(data) // step
        self._rest = data[n * step:]
        frames = []
        for k in range(n):
            end = self.clock.place(arrived_ms - (n - 1 - k) * FRAME_MS, FRAME_MS)
            frames.append(FRAME_HEADER.pack(end, self._seq, rate) + data[k * step:(k + 1) * step])
            self._seq += 1
        return frames
