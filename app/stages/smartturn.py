"""End of turn from the voice: Smart Turn v3.2, Pipecat's audio end-of-turn model.

Input: the user's utterance so far, 16 kHz mono float32, ending where they paused. Output:
the probability that the turn is complete, read from intonation and the sound of the last
words rather than from the transcript. Only the last `WINDOW` counts: longer audio keeps its end,
shorter audio gets silence in front, as Pipecat feeds the model (its
`LocalSmartTurnAnalyzerV3` in pipecat-ai 1.14.0, which `features` reproduces).

The model: a Whisper-tiny encoder with a classifier and a sigmoid, a small int8 ONNX file,
BSD-2-Clause (Daily / Pipecat). `python -m app.ops.prepare smartturn` takes the file out of the
pipecat-ai wheel on PyPI, without installing pipecat, into models/smart-turn-v3.2/ with its
LICENSE.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from app.messages import RATE
from app.paths import MODELS

WINDOW = 8 * RATE  # the model's window: 800 of Whisper's mel frames
MODEL_PATH = MODELS / "smart-turn-v3.2" / "smart-turn-v3.2-cpu.onnx"


@cache
def _mel() -> Any:  # faster_whisper's FeatureExtractor, imported lazily
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor(feature_size=80, sampling_rate=RATE)


def features(audio: np.ndarray) -> np.ndarray:
    """The model's input, shape (1, 80, 800): Whisper log-mel of the last `WINDOW`.

    As transformers' WhisperFeatureExtractor with `do_normalize=True` computes it (pipecat
    vendors that code in numpy): the whole window, its padding included, is scaled to
    zero mean and unit variance before the spectrogram. faster-whisper's extractor has the
    same mel math without that step, so it is done here; `padding=0` because the window is
    already exactly `WINDOW` samples (the extractor drops the last STFT frame: 800 frames remain).
    """
    x = np.asarray(audio, dtype=np.float32).reshape(-1)[-WINDOW:]
    x = np.pad(x, (WINDOW - len(x), 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    return _mel()(x, padding=0)[None].astype(np.float32)


class SmartTurn:
    """P(turn complete) for the utterance so far; `setup()` loads the model."""

    def __init__(self, path: Path | None = None, threads: int = 1) -> None:
        self.path = path or MODEL_PATH
        self.threads = threads
        self._session: Any = None

    def setup(self) -> None:
        if self._session is not None:
            return
        if not self.path.is_file():
            raise SystemExit(f"Smart Turn model {self.path} not found: run "
                             "`python -m app.ops.prepare smartturn` (part of `make models`).")
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(self.path), sess_options=opts, providers=["CPUExecutionProvider"])

    def __call__(self, audio: np.ndarray) -> float:
        self.setup()
        # the graph ends in a sigmoid: its output "logits" is already a probability
        (p,) = self._session.run(None, {"input_features": features(audio)})
        return float(np.asarray(p).reshape(-1)[0])
