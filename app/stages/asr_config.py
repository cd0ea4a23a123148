"""The ASR's settings (app/stages/asr.py reads them; app/stages/asrhost.py shares one ASR)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.paths import MODELS

ASR_COMPUTE = {"cpu": "int8", "cuda": "float16"}
"""The ASR's CTranslate2 compute type on each device (`AsrConfig.compute_type`)."""

CPU_SHORT_WINDOW_S = 6.0
"""`--asr-short-window-s` on the CPU (on a GPU the encoder's window costs little: off)."""


@dataclass
class AsrConfig:
    model: str = str(MODELS / "whisper-base")
    """CTranslate2 model directory or a faster-whisper hub id ("base", "small", ...)."""
    language: str = "auto"
    """"auto" to detect, or a fixed code such as "en" or "zh"."""
    device: Literal["cpu", "cuda"] = "cpu"
    compute_type: str = "int8"
    """int8 on the CPU, float16 on the GPU (`--asr-device`)."""
    beam_size: int = 1
    """Beam search width (`--asr-beam`). On the demo's tiny.en, a beam of 3 lowers WER on the
    benchmark's clips offline (`python -m bench.wer.beam`), but raises it in the live
    voice-to-voice run, and is slower there (docs/PERFORMANCE.md): greedy stays."""
    cpu_threads: int = 0
    """CTranslate2 threads (`--asr-threads`); 0: one per core of `cpus`."""
    cpus: tuple[int, ...] = ()
    """Cores ASR may run on (empty: the app's)."""
    detect_model: str = ""
    """Multilingual CTranslate2 dir that detects the language when `model` is English-only
    and the language is "auto"; speech in another language is transcribed by it."""
    zh_prompt: str = "以下是普通话的句子，使用简体中文。"
    """The prompt a Mandarin reading starts from ("": none). After t2s (`simplify`) it lowers
    no CER, but without it Whisper leaves finished Mandarin sentences without a closing mark
    far more often, and the end of turn then holds them (`python -m bench.wer.mandarin`,
    `python -m bench.turn_detection`, docs/PERFORMANCE.md)."""
    simplify: bool = True
    """Mandarin transcripts in simplified characters (OpenCC's t2s); off only to measure what
    Whisper wrote."""
    languages: tuple[str, ...] = ("en", "zh")
    """The languages the agent hears as such: the detector decides among them, and takes
    another only when it is certain of it (`app.stages.whisper_read.CERTAIN_LANGUAGE`)."""
    window_s: float = 10.0
    """Audio window the encoder reads for a short utterance (Whisper's own is longer;
    longer utterances take it); `python -m bench.asr` compares the two (docs/PERFORMANCE.md)."""
    short_window_s: float = 0.0
    """A shorter window for an utterance at least a second shorter than it (0: off,
    `window_s` for all); the app's default on the CPU is `CPU_SHORT_WINDOW_S`. The encoder's cost
    follows the window. A transcript that loops there keeps its first copy when the clip
    could not hold the rest (`app.stages.whisper_read.first_copy`), so few are read again: on the
    CPU, for questions and sentences as the page's microphone and the endpointer give them, a clip
    is faster and no worse in WER (`python -m bench.wer.windows 6 5 4`,
    docs/PERFORMANCE.md)."""
    batch: int = 16
    """At most this many waiting requests (other conversations' turns) decoded together."""
    host: str = ""
    """A worker's: the socket of its parent's ASR (app/stages/asrhost.py), shared by all workers;
    empty: its own model."""
