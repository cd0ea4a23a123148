"""One ASR for all the workers of a host (`python -m app --workers N`).

Each worker loading its own Whisper would make N copies of the model, N batches where one
would do, and, on a GPU, N more CUDA contexts taking turns on the card with the model
server's: the server's own first-token time grows several-fold with four workers while the
GPU stays mostly idle (measured in docs/PERFORMANCE.md, many conversations on one GPU).
So the parent process, which starts the workers, keeps the one `Asr` and serves it on a
Unix socket in its private folder (`multiprocessing.connection`, with a key the workers
inherit in their environment); a worker's `RemoteAsr` sends each request there. Requests
of every worker's conversations then wait in one queue and are decoded together (`Asr`'s
batching).
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

import numpy as np

from app.config import AsrConfig
from app.messages import Transcript
from app.stages.asr import Asr

log = logging.getLogger(__name__)
KEY_ENV = "VOICE_AGENT_ASR_KEY"
"""The environment variable that hands the socket's key to the workers (not their argv,
which any local user can read)."""


class AsrHost:
    """The parent's side: the model, and a thread per connected worker."""

    def __init__(self, cfg: AsrConfig, folder: Path, concurrency: int = 64) -> None:
        self.asr = Asr(cfg)
        self.address = str(folder / "asr.sock")
        self.key = secrets.token_bytes(32)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="asr-host")
        self._listener: Listener | None = None
        self._largest = 0

    def start(self) -> AsrHost:
        self.asr.setup()
        self._listener = Listener(self.address, "AF_UNIX", authkey=self.key)
        os.environ[KEY_ENV] = self.key.hex()  # for the workers started after this
        threading.Thread(target=self._accept, name="asr-host", daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:  # closed by stop()
                return
            except Exception as exc:  # a wrong key: refused, the others go on
                log.warning("ASR host: a connection was refused: %s", exc)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="asr-host-conn",
                             daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        """A worker's requests, each answered when its decode is done (out of order: one
        worker's requests are batched like anyone's)."""
        sending = threading.Lock()

        def answer(ident: int, turn_id: int, audio: np.ndarray, language: str | None,
                   expect: str | None) -> None:
            try:
                reply: object = self.asr.process(turn_id, audio, language, expect)
            except Exception as exc:  # the worker's turn fails with it, the host goes on
                reply = f"{type(exc).__name__}: {exc}"
            if self.asr.largest_batch > self._largest:
                self._largest = self.asr.largest_batch
                log.info("ASR host: %d requests decoded as one batch", self._largest)
            with sending:
                try:
                    conn.send((ident, reply))
                except OSError:  # that worker is gone
                    pass

        conn.send(("hello", self.asr.warmup_ms))
        with conn:
            while True:
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    return
                self._pool.submit(answer, *request)

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class RemoteAsr:
    """A worker's ASR: `Asr`'s calls, answered by the parent's `AsrHost`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.warmup_ms: float | None = None
        """The host's warm-up decode (paid once, in the parent)."""
        self._conn: Connection | None = None
        self._waiting: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def setup(self) -> None:
        with self._lock:
            if self._conn is not None:
                return
            key = os.environ.get(KEY_ENV)
            if not key:
                raise SystemExit(f"--asr-host needs the host's key in ${KEY_ENV}: it is set "
                                 "by the parent `python -m app --workers N`, not by hand.")
            try:
                conn = Client(self.address, "AF_UNIX", authkey=bytes.fromhex(key))
                tag, self.warmup_ms = conn.recv()
                assert tag == "hello", tag
            except (OSError, EOFError) as exc:
                raise RuntimeError(f"the app's ASR host at {self.address} does not answer "
                                   f"({exc}); is its parent process still running?") from exc
            self._conn = conn
            threading.Thread(target=self._read, args=(conn,), name="asr-remote",
                             daemon=True).start()

    def _read(self, conn: Connection) -> None:
        try:
            while True:
                ident, reply = conn.recv()
                with self._lock:
                    done = self._waiting.pop(ident, None)
                if done is None:
                    continue
                if isinstance(reply, Transcript):
                    done.set_result(reply)
                else:
                    done.set_exception(RuntimeError(f"the app's ASR host: {reply}"))
        except (EOFError, OSError) as exc:
            with self._lock:  # every request in flight fails; the next call connects again
                self._conn = None
                waiting, self._waiting = self._waiting, {}
            for done in waiting.values():
                done.set_exception(RuntimeError(f"the app's ASR host went away ({exc!r})"))

    def process(self, turn_id: int, audio: np.ndarray, language: str | None = None,
                expect: str | None = None) -> Transcript:
        self.setup()
        done: Future = Future()
        with self._lock:
            ident = next(self._ids)
            self._waiting[ident] = done
            conn = self._conn
            try:
                if conn is None:  # lost since setup(): the reader failed what was waiting
                    raise OSError("connection closed")
                conn.send((ident, turn_id, np.ascontiguousarray(audio, np.float32), language,
                           expect))
            except OSError as exc:
                self._waiting.pop(ident, None)
                raise RuntimeError(f"the app's ASR host went away ({exc})") from exc
        return done.result()
