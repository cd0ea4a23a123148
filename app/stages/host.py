"""One stage for all the workers of a host (`python -m app --workers N`): the parent process,
which starts the workers, keeps the stage and serves it on a Unix socket in its private
folder (`multiprocessing.connection`, with a key the workers inherit in their environment,
not their argv, which any local user can read). A worker's `Remote` sends each call there.

Calls from every worker's conversations then meet in one queue: a batching stage (the ASR)
decodes them together, and a stage that runs one call at a time (the voice) has all its
threads for whichever worker needs them, where a worker's own copy would wait on its own
share of the cores while another worker's sat idle. `app.stages.asrhost` and
`app.stages.tts.host` are the two.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Failure:
    """A call that raised in the host: the worker's call raises it again, as `kind` where
    the stage's client knows that exception, and the host goes on."""

    kind: str
    message: str


class Host:
    """The parent's side: `handle(*args)` for each call, on a pool of `concurrency` threads;
    a thread per connected worker reads its calls."""

    def __init__(self, name: str, folder: Path, key_env: str,
                 handle: Callable[..., object], hello: Callable[[], object],
                 concurrency: int, cpus: tuple[int, ...] = ()) -> None:
        self.name = name
        self.address = str(folder / f"{name}.sock")
        self.key_env = key_env
        self.key = secrets.token_bytes(32)
        self._handle = handle
        self._hello = hello
        self.cpus = cpus
        """Cores the calls run on (empty: the process's): `--cpus` keeps them off the cores
        a model server spins on."""
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"{name}-host",
                                        initializer=self._pin)
        self._listener: Listener | None = None

    def _pin(self) -> None:
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)  # this thread only

    def start(self) -> None:
        self._listener = Listener(self.address, "AF_UNIX", authkey=self.key)
        os.environ[self.key_env] = self.key.hex()  # for the workers started after this
        threading.Thread(target=self._accept, name=f"{self.name}-host", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:  # closed by stop()
                return
            except Exception as exc:  # a wrong key: refused, the others go on
                log.warning("%s host: a connection was refused: %s", self.name, exc)
                continue
            threading.Thread(target=self._serve, args=(conn,), name=f"{self.name}-host-conn",
                             daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        """A worker's calls, each answered when it is done (out of order: one worker's calls
        wait in the same queue as anyone's)."""
        sending = threading.Lock()

        def answer(ident: int, args: tuple) -> None:
            try:
                reply: object = self._handle(*args)
            except Exception as exc:  # the worker's call fails with it, the host goes on
                reply = Failure(type(exc).__name__, str(exc))
            with sending:
                try:
                    conn.send((ident, reply))
                except (OSError, TypeError, ValueError):  # that worker is gone
                    pass
                except Exception as exc:  # a reply that cannot travel: the call fails
                    conn.send((ident, Failure(type(exc).__name__, str(exc))))

        conn.send(("hello", self._hello()))
        while True:
            try:
                ident, args = conn.recv()
            except (EOFError, OSError):
                with sending:  # not while an answer is being written
                    conn.close()
                return
            self._pool.submit(answer, ident, args)

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class RemoteError(RuntimeError):
    """The host could not be reached, went away, or its call raised (`failure`)."""

    def __init__(self, message: str, failure: Failure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


class Remote:
    """A worker's side: `call(*args)` answered by the parent's `Host`, one connection for all
    the worker's threads, connected again after the host was lost."""

    def __init__(self, name: str, address: str, key_env: str, flag: str) -> None:
        self.name = name
        self.address = address
        self.key_env = key_env
        self.flag = flag
        self.hello: object = None
        """What the host said on connecting (the ASR: its warm-up decode)."""
        self._conn: Connection | None = None
        self._waiting: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def setup(self) -> None:
        with self._lock:
            if self._conn is not None:
                return
            key = os.environ.get(self.key_env)
            if not key:
                raise SystemExit(f"{self.flag} needs the host's key in ${self.key_env}: it is "
                                 "set by the parent `python -m app --workers N`, not by hand.")
            try:
                conn = Client(self.address, "AF_UNIX", authkey=bytes.fromhex(key))
                tag, self.hello = conn.recv()
            except (OSError, EOFError) as exc:
                raise RemoteError(f"the app's {self.name} host at {self.address} does not "
                                  f"answer ({exc}); is its parent process still running?"
                                  ) from exc
            if tag != "hello":
                conn.close()
                raise RemoteError(f"the app's {self.name} host at {self.address} answered "
                                  f"{tag!r}, not its greeting")
            self._conn = conn
            threading.Thread(target=self._read, args=(conn,), name=f"{self.name}-remote",
                             daemon=True).start()

    def _read(self, conn: Connection) -> None:
        try:
            while True:
                ident, reply = conn.recv()
                with self._lock:
                    done = self._waiting.pop(ident, None)
                if done is None:
                    continue
                if isinstance(reply, Failure):
                    done.set_exception(RemoteError(f"the app's {self.name} host: {reply.kind}: "
                                                   f"{reply.message}", reply))
                else:
                    done.set_result(reply)
        except (EOFError, OSError) as exc:
            conn.close()
            with self._lock:  # every call in flight fails; the next call connects again
                self._conn = None
                waiting, self._waiting = self._waiting, {}
            for done in waiting.values():
                done.set_exception(RemoteError(f"the app's {self.name} host went away "
                                               f"({exc!r})"))

    def call(self, *args: object) -> object:
        self.setup()
        done: Future = Future()
        with self._lock:
            ident = next(self._ids)
            self._waiting[ident] = done
            conn = self._conn
            try:
                if conn is None:  # lost since setup(): the reader failed what was waiting
                    raise OSError("connection closed")
                conn.send((ident, args))
            except OSError as exc:
                self._waiting.pop(ident, None)
                raise RemoteError(f"the app's {self.name} host went away ({exc})") from exc
        return done.result()
