"""espeak-ng: the last resort; always installed (Debian), robotic but instant."""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np

from app.stages.tts.base import TtsError

VOICES = {"en": "en-us", "zh": "cmn"}


class EspeakTts:
    name = "espeak"
    languages = ("en", "zh")
    online = False

    def setup(self) -> None:
        if shutil.which("espeak-ng") is None:
            raise SystemExit("espeak-ng is not installed: apt-get install espeak-ng")

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int]:
        import soundfile as sf

        voice = VOICES.get(language, "en-us")
        try:
            # text on stdin: a reply starting with "-" must not read as an option
            proc = subprocess.run(["espeak-ng", "-v", voice, "-s", "165", "--stdout"],
                                  input=text.encode(), capture_output=True, timeout=20,
                                  check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise TtsError(f"espeak-ng failed: {exc}") from exc
        pcm, rate = sf.read(io.BytesIO(proc.stdout), dtype="int16")
        if pcm.ndim == 2:
            pcm = pcm[:, 0]
        return pcm, rate
