"""A client of the app's audio channel that does what the page does, for hosts without a
browser (a GPU server) and for tests: it asks for a session, streams microphone frames
(`FRAME_MS` each) stamped with its own clock, receives the reply's audio, and reports when
each reply became "audible" (the moment its first chunk arrived: no speaker here) and when
it ended. The app then measures and records the turn exactly as for the page
(`/agent/export`).

    with VoiceClient("http://127.0.0.1:7860/", auth=("me", "pw")) as client:
        reply = client.say(pcm16k)          # paced like a microphone, then silence
        print(reply.events, reply.first_audio_ms - reply.stream_start_ms)  # ms from its start
        rows = client.export()

An app at its `--max-sessions` refuses a new session: `open` raises `AgentBusy`, which says
when to try again.
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass, field

import httpx
import numpy as np

from app.core.wire import AUDIO_HEADER, FRAME_HEADER
from app.messages import RATE
from app.stages.audio import resample

FRAME_MS = 20


def now_ms() -> float:
    """The client's clock (its "browser" time)."""
    return time.perf_counter() * 1000.0


LEAD_S = 0.3
"""Silence `say` sends before a clip, as a microphone picks up the room before the words."""


@dataclass
class Reply:
    turn: int = 0
    """The turn whose reply this is: the newest turn whose audio arrived."""
    first_audio_ms: float | None = None
    """Client time the reply's first audio arrived."""
    stream_start_ms: float = 0.0
    """Client time of the first sample sent: sample n of the clip, with the `LEAD_S` of
    silence before it, went out at stream_start_ms + n / rate (the microphone's pace)."""
    chunks: list[np.ndarray] = field(default_factory=list)
    rate: int = 0
    events: list[dict] = field(default_factory=list)
    """Every text message the app sent meanwhile (commands, errors)."""
    ended: int = 0
    """The turn whose end came (all its audio sent)."""
    paused_at: float | None = None
    """Client time the app paused the reply (its words are being checked), until resumed."""
    done: list[int] = field(default_factory=list)
    """Turns whose reply played out (reported "done")."""
    stopped: list[int] = field(default_factory=list)
    """Turns whose reply the app stopped meanwhile (the clip's words went on over a reply
    to its first part): their audio is not in `chunks`."""

    @property
    def duration_ms(self) -> float:
        """How long the reply's audio so far plays."""
        return sum(len(c) for c in self.chunks) * 1000.0 / self.rate if self.rate else 0.0

    @property
    def audio(self) -> np.ndarray:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int16)


class AgentBusy(ConnectionError):
    """The app serves as many conversations as it may (its `--max-sessions`)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(f"{message} (retry after {retry_after_s:g} s)")
        self.retry_after_s = retry_after_s


class VoiceClient:
    def __init__(self, base_url: str, auth: tuple[str, str] | None = None,
                 rate: int = 48000, verify: ssl.SSLContext | bool = True,
                 timeout_s: float = 30.0) -> None:
        """`verify`: how an https app's certificate is checked (a context that trusts a
        self-signed one, say); `timeout_s`: for each HTTP request, the audio channel's
        handshake and its first message."""
        self.base_url = base_url.rstrip("/") + "/"
        self.rate = rate
        self.verify = verify
        self.timeout_s = timeout_s
        self.sid = ""
        self._ws = None
        self._seq = 0
        # keeps the cookies an app with --workers sets (its balancer's: which worker holds
        # this session); the audio channel sends them back
        self._http = httpx.Client(auth=auth, timeout=timeout_s, verify=verify)

    # --- HTTP routes ---------------------------------------------------------------------
    def _json(self, path: str, method: str = "GET") -> object:
        resp = self._http.request(method, self.base_url + path)
        if resp.status_code == 503:
            raise AgentBusy(resp.json().get("message", "the agent is busy"),
                            float(resp.headers.get("Retry-After", 0)))
        resp.raise_for_status()
        return resp.json()

    def export(self) -> list[dict]:
        """The session's per-turn records, as the app measured them."""
        return self._json(f"agent/export/{self.sid}.json")  # type: ignore[return-value]

    # --- the audio channel ----------------------------------------------------------------
    def open(self, sid: str = "") -> VoiceClient:
        """Connect under `sid`, or under a new session the app issues."""
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        self.sid = sid or self._json("agent/session", "POST")["sid"]  # type: ignore[index]
        url = self.base_url.replace("http", "ws", 1) + f"agent/ws/{self.sid}"
        cookies = "; ".join(f"{c.name}={c.value}" for c in self._http.cookies.jar)
        for attempt in (1, 2):
            try:
                self._ws = connect(url, max_size=None, ssl=self._ssl(url),
                                   open_timeout=self.timeout_s,
                                   additional_headers={"Cookie": cookies} if cookies else None)
                break
            except TimeoutError as exc:
                raise ConnectionError(f"{url}: no answer to the audio channel's handshake in "
                                      f"{self.timeout_s:g} s") from exc
            except ssl.SSLCertVerificationError:
                raise
            except (ssl.SSLError, ConnectionClosed) as exc:
                # over TLS the sync client reads on its own thread while this one writes the
                # upgrade request; a session ticket arriving then can break the connection
                # before the server saw the request (the session is not taken): once more
                if attempt == 2:
                    raise ConnectionError(f"{url}: the audio channel's handshake failed "
                                          f"twice ({exc!r})") from exc
        first = json.loads(self._ws.recv(timeout=self.timeout_s))
        if first.get("type") == "busy":  # a released session's slot was taken meanwhile
            self.close()
            raise AgentBusy(first["message"], first.get("retry_after_s", 0))
        if first.get("type") != "ready":
            raise ConnectionError(f"the app refused the session: {first}")
        return self

    def _ssl(self, url: str) -> ssl.SSLContext | None:
        if not url.startswith("wss:"):
            return None
        if isinstance(self.verify, ssl.SSLContext):
            return self.verify
        context = ssl.create_default_context()
        if not self.verify:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def __enter__(self) -> VoiceClient:
        return self.open() if self._ws is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes | str) -> None:
        self._ws.send(data)

    @property
    def _frame_samples(self) -> int:
        return self.rate * FRAME_MS // 1000

    def _send_frame(self, captured_ms: float, pcm: bytes) -> None:
        """One microphone frame as the page sends it: its capture time, number, rate."""
        self._ws.send(FRAME_HEADER.pack(captured_ms, self._seq, self.rate) + pcm)
        self._seq += 1

    def say(self, speech16k: np.ndarray, timeout_s: float = 90.0,
            over: np.ndarray | None = None) -> Reply:
        """Speak at the microphone's pace, then go on sending silence (as a microphone does:
        a hold for open words needs up to `TurnConfig.cap_ms` of it) until the reply's end;
        return the reply. Between frames, spoken or silent, the client waits on the
        socket, so a reply chunk is taken the moment it arrives, as the page's player takes
        it: also while the clip's own trailing sound is still being sent (read only after
        it, a reply ready early would look late). `over`: words said over the reply once its
        first audio came (a barge-in); the replies then play at their own pace, as from a
        speaker (the player reports "done" when a reply's audio would have played out, not
        when its last chunk came), the reply returned is the one to those words, and
        `Reply.stopped` names the turn they stopped."""
        n = self._frame_samples
        spoken = self._frames(speech16k, lead_s=LEAD_S)
        quiet = np.zeros(n, "<i2").tobytes()
        reply = Reply()
        deadline = time.monotonic() + timeout_s
        start = now_ms()
        reply.stream_start_ms = start
        k = 0
        paced = over is not None
        while time.monotonic() < deadline:
            due = start + (k + 1) * FRAME_MS
            talking = over is not None or k < len(spoken)  # the user is not done yet
            if self._drain(reply, wait_s=max(0.0, (due - now_ms()) / 1000), paced=paced,
                           talking=talking):
                return reply
            if over is not None and reply.first_audio_ms is not None and k >= len(spoken):
                # from this frame on: the silence sent since the clip ended stays in its
                # place (else the over clip's first frames are lost under it, as many as
                # the reply took: on a slow box all of it)
                spoken = spoken + [quiet] * (k - len(spoken)) + self._frames(over)
                over = None
            self._send_frame(due, spoken[k] if k < len(spoken) else quiet)
            k += 1
        raise TimeoutError(f"no reply within {timeout_s:.0f} s; events: {reply.events[-5:]}")

    def _frames(self, speech16k: np.ndarray, lead_s: float = 0.0) -> list[bytes]:
        """16 kHz float speech as the microphone's frames, after `lead_s` of silence."""
        lead = np.zeros(int(lead_s * RATE), np.float32)
        x = (resample(np.concatenate([lead, speech16k.astype(np.float32)]), RATE, self.rate)
             * 32767).astype("<i2")
        n = self._frame_samples
        return [x[i:i + n].tobytes() for i in range(0, len(x) - n + 1, n)]

    def _drain(self, reply: Reply, wait_s: float, paced: bool = False,
               talking: bool = False) -> bool:
        """Read what arrives within `wait_s`, answering as the page's player does; True once
        the reply's end came (and was reported done) and the user is not `talking` (the
        words said over a reply go on after a short reply played out: it is reported done,
        and the words may still get a turn of their own). A newer turn's audio makes it the
        reply (the user's words went on after a pause that ended a turn: the app answers
        the whole sentence as a new turn); a stop command is answered "stopped". `paced`:
        the reply is done once its audio would have played out after its first chunk."""
        until = time.monotonic() + wait_s
        while True:
            if reply.ended == reply.turn and reply.turn and reply.turn not in reply.done \
                    and (not paced or (reply.paused_at is None
                                       and now_ms() >= reply.first_audio_ms + reply.duration_ms)):
                self._report("done", reply.turn, heard=[1.0] * len(reply.chunks))
                reply.done.append(reply.turn)
            if reply.done and reply.done[-1] == reply.turn and not talking:
                return True
            try:
                msg = self._ws.recv(timeout=max(0.0, until - time.monotonic()))
            except TimeoutError:
                return False
            if isinstance(msg, bytes):
                turn, _index, rate, _ = AUDIO_HEADER.unpack_from(msg)
                if turn in reply.stopped or turn < reply.turn:
                    continue  # a stopped reply's audio still under way: dropped, as the page does
                if turn != reply.turn:
                    reply.turn, reply.rate, reply.first_audio_ms = turn, rate, now_ms()
                    reply.chunks = []
                    self._report("audible", turn, received_ms=reply.first_audio_ms)
                reply.chunks.append(np.frombuffer(msg, "<i2", offset=AUDIO_HEADER.size))
                continue
            event = json.loads(msg)
            kind = event.get("type")
            if kind == "render":
                continue  # the page's cue to fetch its view; a script has none
            reply.events.append(event)
            if kind == "pause":  # silent at once (no speaker here); the clock stops
                self._report("paused", event["turn"], cause_ms=event.get("cause_ms"))
                if event["turn"] == reply.turn and reply.paused_at is None:
                    reply.paused_at = now_ms()
            elif kind == "resume":
                if event["turn"] == reply.turn and reply.paused_at is not None:
                    reply.first_audio_ms += now_ms() - reply.paused_at  # plays on from there
                reply.paused_at = None
            elif kind == "stop":
                turn = event["turn"]
                heard = [1.0] * len(reply.chunks) if turn == reply.turn else []
                self._report("stopped", turn, cause_ms=event.get("cause_ms"), heard=heard)
                reply.stopped.append(turn)
                if turn == reply.turn:
                    reply.turn, reply.first_audio_ms, reply.chunks = 0, None, []
                    reply.paused_at = None
            elif kind == "end" and event.get("turn") == reply.turn and reply.chunks:
                reply.ended = reply.turn

    def _report(self, kind: str, turn: int, **fields) -> None:
        """One of the player's reports (audible, paused, stopped, done), at this moment."""
        t = fields.pop("received_ms", None) or now_ms()
        if kind == "audible":
            fields["received_ms"] = t
        self._ws.send(json.dumps({"type": kind, "turn": turn, "t_ms": t, **fields}))
