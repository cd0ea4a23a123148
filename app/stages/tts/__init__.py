"""Text to speech: one file per engine, all behind `TtsEngine`; `FallbackTts` chains them.

`auto` tries edge-tts (online, a neural voice per language) and falls back at once to the
offline engine for the language: piper for English, Kokoro for Mandarin, espeak-ng as the
last resort.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np

from app.language import is_cjk
from app.stages.tts.base import TtsConfig, TtsEngine, TtsError

log = logging.getLogger(__name__)
__all__ = ["FallbackTts", "TtsEngine", "TtsError", "Voice", "build_tts", "language_of"]


class Voice(Protocol):
    """What a turn speaks with: this process's engines (`FallbackTts`), or the parent's,
    shared by all workers (`app.stages.tts.host.RemoteTts`)."""

    def setup(self) -> None: ...

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int, str, str]:
        """(pcm, rate, engine name, note); raises `TtsError` when no engine could."""


def language_of(text: str, default: str = "en") -> str:
    """"zh" when the text is mostly CJK, else "en" (or the given default for empty text)."""
    cjk = sum(1 for ch in text if is_cjk(ch) and ch.isalpha())
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha())
    if not cjk and not latin:
        return default
    return "zh" if cjk * 2 >= latin else "en"


class FallbackTts:
    """Try engines in order; remember a failed online engine for a while."""

    def __init__(self, engines: list[TtsEngine], retry_after_s: float = 60.0) -> None:
        if not engines:
            raise ValueError("no TTS engine")
        self.engines = engines
        self.retry_after_s = retry_after_s
        self._down_until: dict[str, float] = {}
        self._down_reason: dict[str, str] = {}

    def setup(self) -> None:
        for engine in self.engines:
            engine.setup()

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int, str, str]:
        """Returns (pcm, rate, engine name, note). The note says why an engine was skipped."""
        notes = []
        for engine in self.engines:
            if language not in engine.languages:
                continue
            if time.monotonic() < self._down_until.get(engine.name, 0.0):
                notes.append(f"{engine.name} {self._down_reason[engine.name]}")
                continue
            try:
                pcm, rate = engine.synthesize(text, language)
            except TtsError as exc:
                log.warning("TTS %s failed: %s", engine.name, exc)
                if engine.online:  # an outage: the next pieces do not wait for it
                    self._down_until[engine.name] = time.monotonic() + self.retry_after_s
                    self._down_reason[engine.name] = str(exc)
                notes.append(f"{engine.name} {exc}")
                continue
            return pcm, rate, engine.name, "; ".join(notes)
        if not any(language in e.languages for e in self.engines):
            # no voice for this language at all (`--tts piper`): rather than silence, the
            # first voice reads it, and the turn says so
            engine = self.engines[0]
            try:
                pcm, rate = engine.synthesize(text, engine.languages[0])
            except TtsError as exc:
                notes.append(f"{engine.name} {exc}")
            else:
                return pcm, rate, engine.name, f"no {language} voice: read by {engine.name}"
        raise TtsError(f"no TTS engine could speak {language!r}: " + "; ".join(notes))


def build_tts(cfg: TtsConfig, threads: int = 0) -> FallbackTts:
    """The engines `cfg.engine` names; `threads`: an offline voice's for one clause (0: all
    the process's cores)."""
    from app.stages.tts.edge import EdgeTts
    from app.stages.tts.espeak import EspeakTts
    from app.stages.tts.kokoro import KokoroTts
    from app.stages.tts.piper import PiperTts

    offline: list[TtsEngine] = [PiperTts(cfg.piper_voice, threads), KokoroTts(threads),
                                EspeakTts()]
    chains: dict[str, list[TtsEngine]] = {
        "auto": [EdgeTts(cfg), *offline],
        "edge": [EdgeTts(cfg), *offline],
        "offline": offline,
        # English only: a host without kokoro, espeak-ng
        "piper": [PiperTts(cfg.piper_voice, threads)],
        "espeak": [EspeakTts()],
    }
    return FallbackTts(chains[cfg.engine], retry_after_s=cfg.edge_retry_after_s)
