"""edge-tts: Microsoft's online neural voices. MP3 in, decoded to PCM here."""

from __future__ import annotations

import asyncio
import io

import numpy as np

from app.stages.tts.base import TtsConfig, TtsError

RATE = 24000


class EdgeTts:
    name = "edge"
    languages = ("en", "zh")
    online = True

    def __init__(self, cfg: TtsConfig) -> None:
        self.cfg = cfg

    def setup(self) -> None:
        import edge_tts  # noqa: F401 - fail at start if the package is missing

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int]:
        voice = self.cfg.edge_voice_zh if language == "zh" else self.cfg.edge_voice_en
        try:
            mp3 = asyncio.run(self._fetch(text, voice))
        except TimeoutError as exc:
            raise TtsError(f"no audio within {self.cfg.edge_timeout_s:.1f} s") from exc
        except Exception as exc:  # aiohttp DNS/connection errors, 403, 503 from the service
            raise TtsError(f"unreachable ({type(exc).__name__})") from exc
        if not mp3:
            raise TtsError("the service returned no audio")
        return decode_mp3(mp3), RATE

    async def _fetch(self, text: str, voice: str) -> bytes:
        import edge_tts

        communicate = edge_tts.Communicate(text, voice, proxy=self.cfg.edge_proxy or None)
        stream = communicate.stream().__aiter__()
        out = bytearray()
        # the first audio must come quickly, or the offline engine speaks instead
        deadline = self.cfg.edge_timeout_s
        while True:
            try:
                item = await asyncio.wait_for(stream.__anext__(), timeout=deadline)
            except StopAsyncIteration:
                return bytes(out)
            if item["type"] == "audio":
                out += item["data"]
                deadline = 10.0


def decode_mp3(data: bytes) -> np.ndarray:
    from faster_whisper.audio import decode_audio

    audio = decode_audio(io.BytesIO(data), sampling_rate=RATE)
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)
