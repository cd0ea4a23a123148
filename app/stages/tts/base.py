"""What every TTS engine is (each in a file of its own beside this one)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class TtsError(RuntimeError):
    pass


class TtsEngine(Protocol):
    name: str
    languages: tuple[str, ...]

    def setup(self) -> None: ...

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int]:
        """Return mono int16 PCM and its sample rate; raise TtsError on failure."""
        ...
