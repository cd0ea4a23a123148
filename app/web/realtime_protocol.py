"""The OpenAI Realtime protocol's shapes, as the `openai` SDK's types name them
(`openai/types/realtime/`): the session's configuration and how a `session.update` changes
it, the items and responses the server describes, and the errors it sends. No I/O here: the
socket is app/web/realtime.py's, the replies app/web/realtime_out.py's. What is supported, ignored
and refused, with the reasons: docs/REALTIME.md.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field, replace

from app.web.realtime_audio import PCM, Format, FormatError, parse_format

TURN_TYPES = ("server_vad", "semantic_vad")
MAX_TEXT_CHARS = 4000
"""A typed user item's text: a spoken agent answers a question, not a document."""

REFUSED_EVENTS = {
    "conversation.item.delete": "the history keeps what was said and heard; the agent "
                                "alone cuts it (a barge-in keeps what was heard)",
    "conversation.item.retrieve": "items are not kept for retrieval: the server sends each "
                                  "one whole in conversation.item.done",
    "output_audio_buffer.clear": "a WebRTC and SIP event: over a WebSocket the client holds "
                                 "the audio; send response.cancel to stop a reply",
    "transcription_session.update": "transcription-only sessions are not served",
}
"""Client events the endpoint knows and refuses, with why."""

IGNORED_SESSION_FIELDS = ("model", "voice", "speed", "noise_reduction", "max_output_tokens",
                          "tracing", "truncation", "include", "prompt", "reasoning",
                          "tool_choice", "parallel_tool_calls", "threshold",
                          "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms",
                          "eagerness")
"""Accepted and ignored (docs/REALTIME.md says why each)."""


class ProtocolError(Exception):
    """A client event the endpoint cannot act on: becomes an `error` event."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


class Ids:
    """Ids of one connection's events, items and responses (the protocol's prefixes)."""

    def __init__(self) -> None:
        self._tag = secrets.token_hex(4)
        self._n = itertools.count(1)

    def __call__(self, prefix: str) -> str:
        return f"{prefix}_{self._tag}{next(self._n):05d}"


@dataclass(frozen=True)
class SessionConfig:
    """What one client configured. `turn_detection` None: the client commits its audio
    (`input_audio_buffer.commit`) and asks for each response."""

    instructions: str | None = None
    voice: object = "app"
    text_only: bool = False
    """output_modalities ["text"]: the reply's words, no audio."""
    input_format: Format = PCM
    output_format: Format = PCM
    transcription: dict | None = field(default_factory=lambda: {"model": "app"})
    turn_detection: str | None = "server_vad"

    def update(self, s: object) -> SessionConfig:
        """The configuration after a `session.update`'s `session` object; raises
        ProtocolError (and changes nothing) on a value the endpoint cannot honour."""
        if not isinstance(s, dict):
            raise ProtocolError("invalid_value", "session must be an object", "session")
        if s.get("type", "realtime") != "realtime":
            raise ProtocolError("unsupported_session_type", "only realtime sessions are "
                                "served (not transcription)", "session.type")
        c = self
        if "instructions" in s:
            text = s["instructions"]
            if text is not None and not isinstance(text, str):
                raise ProtocolError("invalid_value", "instructions must be a string",
                                    "session.instructions")
            c = replace(c, instructions=text or None)
        if "output_modalities" in s:
            modes = s["output_modalities"]
            if modes not in (["audio"], ["text"]):
                raise ProtocolError("invalid_value", 'output_modalities is ["audio"] or '
                                    '["text"]', "session.output_modalities")
            c = replace(c, text_only=modes == ["text"])
        if s.get("tools"):
            raise ProtocolError("unsupported_tools", "function and MCP tools are not "
                                "supported: the agent answers in speech only", "session.tools")
        audio = s.get("audio") or {}
        if not isinstance(audio, dict):
            raise ProtocolError("invalid_value", "audio must be an object", "session.audio")
        return c._update_input(audio.get("input") or {})._update_output(
            audio.get("output") or {})

    def _update_input(self, a: dict) -> SessionConfig:
        c = self
        if "format" in a:
            c = replace(c, input_format=_format(a["format"], "session.audio.input.format"))
        if "transcription" in a:
            if a["transcription"] is not None and not isinstance(a["transcription"], dict):
                raise ProtocolError("invalid_value", "transcription must be an object or null",
                                    "session.audio.input.transcription")
            c = replace(c, transcription=a["transcription"])
        if "turn_detection" in a:
            c = replace(c, turn_detection=_detection(a["turn_detection"]))
        return c

    def _update_output(self, a: dict) -> SessionConfig:
        c = self
        if "format" in a:
            c = replace(c, output_format=_format(a["format"], "session.audio.output.format"))
        if "voice" in a:
            c = replace(c, voice=a["voice"])
        return c

    def to_json(self, sid: str, model: str, detection: dict | None) -> dict:
        """The session object of `session.created` / `session.updated` (`detection`: the
        turn detection that applies, `turn_detection_json`)."""
        out = {"type": "realtime", "object": "realtime.session", "id": sid, "model": model,
               "output_modalities": ["text"] if self.text_only else ["audio"],
               "audio": {"input": {"format": self.input_format.to_json(),
                                   "transcription": self.transcription,
                                   "noise_reduction": None, "turn_detection": detection},
                         "output": {"format": self.output_format.to_json(),
                                    "voice": self.voice, "speed": 1.0}},
               "tools": [], "tool_choice": "auto", "max_output_tokens": "inf",
               "tracing": None, "truncation": "auto"}
        if self.instructions is not None:
            out["instructions"] = self.instructions
        return out


def _format(value: object, param: str) -> Format:
    try:
        return parse_format(value)
    except FormatError as exc:
        raise ProtocolError("unsupported_audio_format", str(exc), param) from exc


def _detection(value: object) -> str | None:
    if value is None:
        return None
    param = "session.audio.input.turn_detection"
    if not isinstance(value, dict) or value.get("type") not in TURN_TYPES:
        raise ProtocolError("invalid_value", f"turn_detection is null or one of "
                            f"{', '.join(TURN_TYPES)}", param)
    for flag in ("create_response", "interrupt_response"):
        if value.get(flag) is False:
            raise ProtocolError("unsupported_value", f"{flag} false is not supported: the "
                                "agent answers each turn and words over a reply are always "
                                "checked (set turn_detection to null to commit by hand)",
                                f"{param}.{flag}")
    return value["type"]


def turn_detection_json(requested: str | None, words: bool, silence_ms: int,
                        threshold: float) -> dict | None:
    """The turn detection that applies: the app's own, whichever of the two types the
    client named (`words`: the app ends turns by the words, `--turn-detector`)."""
    if requested is None:
        return None
    if words:
        return {"type": "semantic_vad", "eagerness": "auto", "create_response": True,
                "interrupt_response": True}
    return {"type": "server_vad", "silence_duration_ms": silence_ms, "threshold": threshold,
            "prefix_padding_ms": 0, "create_response": True, "interrupt_response": True}


# --- items, responses, errors --------------------------------------------------------------
def user_item(item_id: str, kind: str, words: str | None, status: str = "completed") -> dict:
    """A user message: spoken (`kind` "input_audio", `words` its transcript) or typed."""
    part = {"type": "input_audio", "transcript": words} if kind == "input_audio" \
        else {"type": "input_text", "text": words}
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
            "status": status, "content": [part]}


def assistant_item(item_id: str, status: str, words: str | None, text_only: bool) -> dict:
    part = {"type": "output_text", "text": words} if text_only \
        else {"type": "output_audio", "transcript": words}
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
            "status": status, "content": [] if words is None else [part]}


def usage(prompt: int | None, reply: int | None, cached: int | None) -> dict:
    """A response's usage: the model's own token counts (no audio tokens: the model reads
    and writes text; speech is recognised and synthesised beside it)."""
    p, r = prompt or 0, reply or 0
    return {"total_tokens": p + r, "input_tokens": p, "output_tokens": r,
            "input_token_details": {"cached_tokens": cached or 0, "text_tokens": p,
                                    "audio_tokens": 0, "image_tokens": 0},
            "output_token_details": {"text_tokens": r, "audio_tokens": 0}}


def error_body(code: str, message: str, param: str | None = None,
               event_id: str | None = None, kind: str = "invalid_request_error") -> dict:
    return {"type": kind, "code": code, "message": message, "param": param,
            "event_id": event_id}
