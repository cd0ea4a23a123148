"""The OpenAI Realtime endpoint, `/v1/realtime` over WebSocket: a transport of the page's
turn-taking core (app/web/transport.py is the page's) for clients of the Realtime protocol
(the openai SDKs' `client.realtime.connect()`, telephony bridges, voice-agent frameworks).

A connection is one conversation: a session of the hub (one of `--max-sessions`' slots), its
turn-taking thread (`Conversation.open`), and `RealtimeOut` (app/web/realtime_out.py) as its
outbox. The client's events become what the page does: appended audio becomes microphone
frames, a typed item and `response.create` a typed turn, `response.cancel` a barge-in.
What is supported, ignored and refused, and why: docs/REALTIME.md.

Credentials: `Authorization: Bearer <--realtime-key>`. Without a key the endpoint is open
where nothing else asks for credentials (no `--auth`: loopback) and off where it does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import secrets
import time

import numpy as np
from fastapi.responses import JSONResponse

from app.config import AppConfig
from app.core.conversation import Conversation
from app.core.seat import MIC_STOP
from app.messages import RATE, MicBytes
from app.stages.audio import resample
from app.web.hub import BUSY, RETRY_AFTER_S, Busy, SessionHub
from app.web.realtime_audio import FormatError
from app.web.realtime_out import Phase, RealtimeOut, Reply
from app.web.realtime_protocol import (
    MAX_TEXT_CHARS,
    REFUSED_EVENTS,
    ProtocolError,
    SessionConfig,
    error_body,
    turn_detection_json,
    user_item,
)

log = logging.getLogger(__name__)
MAX_APPEND_S = 10.0
"""Audio in one append: more waits in the turn-taking queue than it holds."""
BETA = ("this endpoint speaks the GA Realtime protocol: connect with client.realtime.connect()"
        ", not client.beta.realtime.connect() (no OpenAI-Beta: realtime=v1 header)")


def key_refusal(authorization: str, cfg: AppConfig) -> str:
    """Why a connection's credentials do not admit it ("": they do)."""
    if not cfg.realtime_key:
        if cfg.auth is None:
            return ""  # nothing of the app asks for credentials (a loopback app)
        return ("the Realtime endpoint is off: the app asks for credentials (--auth) and was "
                "given no --realtime-key")
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(
            given.strip().encode(), cfg.realtime_key.encode()):
        return "wrong or missing API key (Authorization: Bearer <key>)"
    return ""


async def serve_realtime(ws, hub: SessionHub, conversation: Conversation,
                         cfg: AppConfig) -> None:
    """One Realtime connection (a Starlette `WebSocket`), from its handshake to its close."""
    why = key_refusal(ws.headers.get("authorization", ""), cfg)
    if why:
        body = {"type": "error", "error": error_body("invalid_api_key", why)}
        try:
            await ws.send_denial_response(JSONResponse(body, status_code=401))
        except RuntimeError:  # a server without the denial extension: a close says less
            await ws.close(code=1008, reason="invalid_api_key")
        return
    await ws.accept()
    if "realtime=v1" in ws.headers.get("openai-beta", ""):
        await refuse(ws, "beta_protocol_unsupported", BETA, 1008)
        return
    try:
        session = hub.create(script=True)
        hub.attach(session.sid)
    except Busy:
        await refuse(ws, "session_limit_reached",
                     f"{BUSY} (retry after {RETRY_AFTER_S} s)", 1013, "server_error")
        return
    session.channel = "realtime"
    try:
        await Connection(ws, session, conversation, cfg).run()
    finally:
        hub.detach(session.sid)


async def refuse(ws, code: str, message: str, close_code: int,
                 kind: str = "invalid_request_error") -> None:
    """An `error` event that says why, then the close."""
    await ws.send_text(json.dumps({"type": "error", "event_id": f"event_{secrets.token_hex(6)}",
                                   "error": error_body(code, message, kind=kind)}))
    await ws.close(code=close_code, reason=code)


class Connection:
    def __init__(self, ws, session, conversation: Conversation, cfg: AppConfig) -> None:
        self.ws, self.session, self.conversation, self.cfg = ws, session, conversation, cfg
        self.config = SessionConfig(voice=cfg.tts.engine)
        self.out = RealtimeOut(asyncio.get_running_loop(), session, conversation,
                               lambda: self.config)
        self.pending: list[tuple[str, str, object]] = []
        """User items a response.create will answer: (id, kind, text or audio)."""
        self.buffer = bytearray()
        """Audio not committed yet, while the client commits by hand (int16 PCM)."""
        self.buffer_rate = 0

    async def run(self) -> None:
        from starlette.websockets import WebSocketDisconnect

        self.session.outbox = self.out
        listener = self.out.listener = self.conversation.open(self.session, self.out.decode)
        writer = asyncio.create_task(self._write())
        self.out.emit("session.created", session=self.session_json())
        log.info("realtime session %s opened", self.session.sid[:8])
        try:
            while True:
                msg = await self.ws.receive()
                if msg.get("type") == "websocket.disconnect":
                    break
                if msg.get("text") is not None:
                    await self.handle(msg["text"])
                elif msg.get("bytes") is not None:
                    self.error(ProtocolError("invalid_event", "binary frames carry nothing "
                                             "here: events are JSON text"), None)
        except WebSocketDisconnect:
            pass
        finally:
            writer.cancel()
            self.out.close()
            if self.session.outbox is self.out:
                self.session.outbox = None
            listener.close()
            log.info("realtime session %s closed", self.session.sid[:8])

    async def _write(self) -> None:
        while True:
            text, on_write = await self.out.queue.get()
            if on_write is not None:  # stamped as the write begins, as the page's audio is
                on_write(time.perf_counter())
            await self.ws.send_text(text)

    def session_json(self) -> dict:
        vad = self.cfg.vad
        detection = turn_detection_json(self.config.turn_detection, self.conversation.detector.on,
                                        vad.silence_ms, vad.threshold)
        return self.config.to_json(self.session.sid, self.cfg.primary.model, detection)

    def error(self, exc: ProtocolError, event_id: object) -> None:
        self.out.emit("error", error=error_body(exc.code, exc.message, exc.param,
                                                event_id if isinstance(event_id, str) else None))

    async def handle(self, text: str) -> None:
        try:
            event = json.loads(text)
        except ValueError:
            self.error(ProtocolError("invalid_json", "the event is not JSON"), None)
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.error(ProtocolError("invalid_event", "an event is a JSON object with a "
                                     "type", "type"), None)
            return
        kind = event["type"]
        try:
            handler = HANDLERS.get(kind)
            if handler is None:
                if kind in REFUSED_EVENTS:
                    raise ProtocolError("unsupported_event", f"{kind}: {REFUSED_EVENTS[kind]}",
                                        "type")
                raise ProtocolError("unknown_event", f"unknown event type {kind!r}", "type")
            await handler(self, event)
        except ProtocolError as exc:
            self.error(exc, event.get("event_id"))

    # --- the session ---------------------------------------------------------------------------
    async def session_update(self, event: dict) -> None:
        new = self.config.update(event.get("session"))
        by_hand = new.turn_detection is None
        if by_hand != (self.config.turn_detection is None):
            self.buffer.clear()
            if by_hand:  # the endpointer hears no more: an utterance it held is closed
                self.out.listener.put(MIC_STOP)
        self.config = new
        self.session.instructions = new.instructions
        self.out.emit("session.updated", session=self.session_json())

    # --- audio in ------------------------------------------------------------------------------
    async def append(self, event: dict) -> None:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise ProtocolError("invalid_value", "audio must be base64 text", "audio")
        try:
            data = base64.b64decode(audio, validate=True)
            fmt = self.config.input_format
            pcm = fmt.to_pcm16(data)
        except (binascii.Error, FormatError) as exc:
            raise ProtocolError("invalid_value", f"audio: {exc}", "audio") from exc
        if fmt.ms(len(data)) > MAX_APPEND_S * 1000:
            raise ProtocolError("audio_too_long", f"at most {MAX_APPEND_S:g} s of audio in "
                                "one append: send it as it is spoken", "audio")
        if self.config.turn_detection is None:
            if fmt.rate != self.buffer_rate:
                self.buffer, self.buffer_rate = bytearray(), fmt.rate
            if len(self.buffer) + len(pcm) > self.cfg.vad.max_utterance_s * fmt.rate * 2:
                raise ProtocolError("input_audio_buffer_full", "the buffer holds one "
                                    f"utterance of at most {self.cfg.vad.max_utterance_s:g} "
                                    "s: commit it", "audio")
            self.buffer += pcm
            return
        arrived = time.perf_counter()
        for frame in self.out.frames.cut(pcm, fmt.rate, arrived * 1000.0):
            self.out.listener.put(MicBytes(frame, arrived))

    async def commit(self, event: dict) -> None:
        if self.config.turn_detection is not None:
            raise ProtocolError("turn_detection_on", "turn detection is on: the server "
                                "commits each turn as it ends (set session.audio.input."
                                "turn_detection to null to commit by hand)")
        if len(self.buffer) < self.buffer_rate * 2 // 10 or not self.buffer:
            raise ProtocolError("input_audio_buffer_commit_empty", "buffer too small: commit "
                                "at least 100 ms of audio")
        item = self.out.ids("item")
        self.pending.append((item, "input_audio", (bytes(self.buffer), self.buffer_rate)))
        self.buffer.clear()
        self.out.emit("input_audio_buffer.committed", item_id=item,
                      previous_item_id=self.out.last_item)
        self.out.emit("conversation.item.added", previous_item_id=self.out.last_item,
                      item=user_item(item, "input_audio", None))
        self.out.last_item = item

    async def clear(self, event: dict) -> None:
        """By hand: the uncommitted audio goes. With turn detection the endpointer heard it
        already; nothing is undone (docs/REALTIME.md)."""
        self.buffer.clear()
        self.out.emit("input_audio_buffer.cleared")

    # --- items ---------------------------------------------------------------------------------
    async def item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict) or item.get("type") != "message":
            raise ProtocolError("unsupported_item", "only message items are supported (no "
                                "function calls)", "item.type")
        if item.get("role") != "user":
            raise ProtocolError("unsupported_item", "only user items can be added: the "
                                "history holds what the user said and the agent said aloud",
                                "item.role")
        parts = item.get("content")
        if not isinstance(parts, list) or not parts or any(
                not isinstance(p, dict) or p.get("type") != "input_text"
                or not isinstance(p.get("text"), str) for p in parts):
            raise ProtocolError("unsupported_content", "a user item's content is input_text "
                                "parts (speak to send audio)", "item.content")
        text = " ".join(p["text"] for p in parts).strip()
        if not text or len(text) > MAX_TEXT_CHARS:
            raise ProtocolError("invalid_value", f"the text must have 1 to {MAX_TEXT_CHARS} "
                                "characters", "item.content")
        item_id = item.get("id") if isinstance(item.get("id"), str) else self.out.ids("item")
        self.pending.append((item_id, "input_text", text))
        added = user_item(item_id, "input_text", text)
        self.out.emit("conversation.item.added", previous_item_id=self.out.last_item, item=added)
        self.out.emit("conversation.item.done", previous_item_id=self.out.last_item, item=added)
        self.out.last_item = item_id

    async def truncate(self, event: dict) -> None:
        end = event.get("audio_end_ms")
        if not isinstance(end, int) or end < 0:
            raise ProtocolError("invalid_value", "audio_end_ms must be a whole number of ms",
                                "audio_end_ms")
        r = next((r for r in self.out.replies.values() if r.item_id == event.get("item_id")),
                 None)
        if r is None:
            raise ProtocolError("item_not_found", "no assistant item of this session has "
                                "that id", "item_id")
        if r.phase is Phase.OVER:
            if r.truncated_ms is None:
                raise ProtocolError("item_played_out", "the reply was heard to its end "
                                    "(response.done): only a reply still playing can be "
                                    "truncated", "item_id")
            self.out.emit("conversation.item.truncated", item_id=r.item_id, content_index=0,
                          audio_end_ms=int(r.truncated_ms))
            return
        r.heard_ms, r.reason = float(end), "client_cancelled"
        await self.stop(r)

    # --- responses -----------------------------------------------------------------------------
    async def response_create(self, event: dict) -> None:
        if (r := self.out.active) is not None:
            raise ProtocolError("conversation_already_has_active_response",
                                f"response {r.response_id} is in progress: cancel it first")
        params = event.get("response") or {}
        if isinstance(params, dict) and params.get("conversation") == "none":
            raise ProtocolError("unsupported_value", "out-of-band responses are not supported:"
                                " every reply joins the conversation", "response.conversation")
        if isinstance(params, dict) and (params.get("input") is not None or params.get("tools")):
            raise ProtocolError("unsupported_value", "a response answers the newest user "
                                "items, with no tools", "response.input")
        if not self.pending:
            raise ProtocolError("no_user_input", "nothing to answer: add a user item or commit "
                                "audio first (with turn detection on, spoken turns are "
                                "answered without response.create)")
        kinds = {kind for _, kind, _ in self.pending}
        if len(kinds) > 1:
            raise ProtocolError("unsupported_value", "typed and spoken items in one response: "
                                "ask for a response after each")
        pending, self.pending = self.pending, []
        r = self.out.open_reply([(item, kind) for item, kind, _ in pending])
        loop = asyncio.get_running_loop()
        if kinds == {"input_text"}:
            text = "\n".join(str(v) for _, _, v in pending)
            turn = await asyncio.to_thread(self.conversation.start_text, self.session, text)
            if r.turn_id == 0 and self.out.by_turn(turn.turn_id) is None:
                r.turn_id = turn.turn_id
            self.out.scan()
            return
        audio = np.concatenate([np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
                                for _, _, (pcm, _) in pending])
        audio = resample(audio, pending[0][2][1], RATE)

        def run() -> None:  # the whole turn, on a worker thread: it publishes as it goes
            self.conversation.run_now(self.session, "voice", audio=audio)
            loop.call_soon_threadsafe(self.out.scan)

        loop.run_in_executor(None, run)

    async def response_cancel(self, event: dict) -> None:
        r, wanted = self.out.active, event.get("response_id")
        if r is None or (wanted and wanted != r.response_id):
            raise ProtocolError("response_cancel_not_active", "no such response in progress",
                                "response_id")
        r.reason = "client_cancelled"
        await self.stop(r)

    async def stop(self, r: Reply) -> None:
        """The client ends a reply: the core's barge-in (the stop comes back through the
        outbox); a reply whose turn had nothing playing yet ends here."""
        await asyncio.to_thread(self.conversation.barge_in, self.session)
        if r.phase is not Phase.OVER:
            self.out.stopped(r)


HANDLERS = {
    "session.update": Connection.session_update,
    "input_audio_buffer.append": Connection.append,
    "input_audio_buffer.commit": Connection.commit,
    "input_audio_buffer.clear": Connection.clear,
    "conversation.item.create": Connection.item_create,
    "conversation.item.truncate": Connection.truncate,
    "response.create": Connection.response_create,
    "response.cancel": Connection.response_cancel,
}
"""The client events the endpoint acts on."""
