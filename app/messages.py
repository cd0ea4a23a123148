"""Typed messages between the stages. Timestamps are `time.perf_counter()` seconds."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Transcript:
    turn_id: int
    text: str
    language: str
    asr_start: float
    asr_end: float


@dataclass(frozen=True)
class ReplyDelta:
    """A piece of streamed reply text as it arrived from the model."""

    turn_id: int
    text: str
    t: float


@dataclass(frozen=True)
class SpeechChunk:
    """Synthesised audio for one piece of the reply: mono int16 PCM."""

    turn_id: int
    pcm: np.ndarray = field(repr=False)
    sample_rate: int
    text: str
    engine: str
    t: float

    @property
    def seconds(self) -> float:
        return len(self.pcm) / self.sample_rate
