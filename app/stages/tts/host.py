"""One voice for all the workers of a host (`python -m app --workers N --tts-shared`), served
by the parent (`app.stages.host`).

A worker's own voice reads on the worker's share of the cores: when two of its conversations
need a clause at once they take turns there, while another worker's cores may sit idle. In
the parent, every worker's clauses wait in one queue for a pool of readers on the cores the
app may use (`--cpus`, else all the parent's): each reading runs on its reader's thread and
shares one small onnxruntime pool with the others, so half the cores read at once and the
rest stay free for the workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from app.stages.host import Host, Remote, RemoteError
from app.stages.tts import TtsError, build_tts
from app.stages.tts.base import TtsConfig

KEY_ENV = "VOICE_AGENT_TTS_KEY"
"""The environment variable that hands the socket's key to the workers."""
THREADS_PER_READING = 2
"""Cores per clause read at once: a short clause gains little from more."""


def readers(cores: int) -> int:
    """Clauses read at once on `cores` cores."""
    return max(1, cores // THREADS_PER_READING)


class TtsHost(Host):
    """The parent's side: the voices (`build_tts`), reading every worker's clauses."""

    def __init__(self, cfg: TtsConfig, folder: Path, cpus: tuple[int, ...] = ()) -> None:
        cores = len(cpus or os.sched_getaffinity(0))
        self.tts = build_tts(cfg, threads=min(THREADS_PER_READING, cores))
        self.readers = readers(cores)
        super().__init__("tts", folder, KEY_ENV, self.tts.synthesize, lambda: self.readers,
                         self.readers, cpus)

    def start(self) -> TtsHost:
        # the voices' own threads are made now and take the affinity of the thread that
        # makes them: one of the host's pinned readers
        self._pool.submit(self.tts.setup).result()
        super().start()
        return self


class RemoteTts:
    """A worker's `Voice`: `FallbackTts.synthesize`, answered by the parent's `TtsHost`."""

    def __init__(self, address: str) -> None:
        self._remote = Remote("TTS", address, KEY_ENV, "--tts-host")

    def setup(self) -> None:
        self._remote.setup()

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int, str, str]:
        try:
            return self._remote.call(text, language)
        except RemoteError as exc:  # the turn says the voice failed, as a worker's own would
            if exc.failure is not None and exc.failure.kind == "TtsError":
                raise TtsError(exc.failure.message) from None
            raise TtsError(str(exc)) from exc
