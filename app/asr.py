"""Speech to text with faster-whisper."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from app.config import AsrConfig
from app.messages import Transcript

# Whisper writes Mandarin in traditional characters unless the prompt shows simplified ones.
_ZH_PROMPT = "以下是普通话的句子，使用简体中文。"


class Asr:
    def __init__(self, cfg: AsrConfig) -> None:
        self.cfg = cfg
        self.model = None

    def setup(self) -> None:
        from faster_whisper import WhisperModel

        source = self.cfg.model
        if source.startswith(("/", ".", "~")) and not Path(source).expanduser().is_dir():
            raise SystemExit(f"ASR model directory {source} does not exist. Run `make models` "
                             "or pass --asr-model with a CTranslate2 directory or hub id.")
        try:
            self.model = WhisperModel(str(Path(source).expanduser()) if source.startswith("~")
                                      else source, device=self.cfg.device,
                                      compute_type=self.cfg.compute_type)
        except Exception as exc:  # hub errors, corrupt model.bin, ...
            raise SystemExit(f"Could not load ASR model {source!r}: {exc}. Without internet "
                             "pass --asr-model with a local CTranslate2 directory.") from exc

    def process(self, turn_id: int, audio: np.ndarray, language: str | None = None) -> Transcript:
        if self.model is None:
            self.setup()
        lang = language or self.cfg.language
        t0 = time.perf_counter()
        segments, info = self.model.transcribe(
            audio, language=None if lang == "auto" else lang, beam_size=self.cfg.beam_size,
            condition_on_previous_text=False, without_timestamps=True, vad_filter=False,
            # in auto mode too: detection does not read the prompt, English stays English
            initial_prompt=None if lang == "en" else _ZH_PROMPT,
        )
        text = "".join(s.text for s in segments if s.no_speech_prob < 0.8).strip()
        return Transcript(turn_id, text, info.language, t0, time.perf_counter())
