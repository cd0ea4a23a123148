"""One ASR for all the workers of a host (`python -m app --workers N`), served by the parent
(`app.stages.host`).

Each worker loading its own Whisper would make N copies of the model, N batches where one
would do, and, on a GPU, N more CUDA contexts taking turns on the card with the model
server's: the server's own first-token time grows several-fold while the GPU stays mostly
idle (docs/PERFORMANCE.md, many conversations on one GPU). In the parent, the requests of
every worker's conversations wait in one queue and are decoded together (`Asr`'s batching).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from app.messages import Transcript
from app.stages.asr import Asr
from app.stages.asr_config import AsrConfig
from app.stages.host import Host, Remote

log = logging.getLogger(__name__)
KEY_ENV = "VOICE_AGENT_ASR_KEY"
"""The environment variable that hands the socket's key to the workers."""


class AsrHost(Host):
    """The parent's side: the model, decoding every worker's requests."""

    def __init__(self, cfg: AsrConfig, folder: Path, concurrency: int = 64) -> None:
        self.asr = Asr(cfg)
        self._largest = 0
        super().__init__("asr", folder, KEY_ENV, self._process, lambda: self.asr.warmup_ms,
                         concurrency)

    def start(self) -> AsrHost:
        self.asr.setup()
        super().start()
        return self

    def _process(self, turn_id: int, audio: np.ndarray, language: str | None,
                 expect: str | None) -> Transcript:
        transcript = self.asr.process(turn_id, audio, language, expect)
        if self.asr.largest_batch > self._largest:
            self._largest = self.asr.largest_batch
            log.info("ASR host: %d requests decoded as one batch", self._largest)
        return transcript


class RemoteAsr:
    """A worker's ASR: `Asr`'s calls, answered by the parent's `AsrHost`."""

    def __init__(self, address: str) -> None:
        self._remote = Remote("ASR", address, KEY_ENV, "--asr-host")

    @property
    def warmup_ms(self) -> float | None:
        """The host's warm-up decode (paid once, in the parent)."""
        return self._remote.hello

    def setup(self) -> None:
        self._remote.setup()

    def process(self, turn_id: int, audio: np.ndarray, language: str | None = None,
                expect: str | None = None) -> Transcript:
        return self._remote.call(turn_id, np.ascontiguousarray(audio, np.float32), language,
                                 expect)
