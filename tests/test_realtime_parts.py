"""The Realtime endpoint's parts without a model: its audio formats, the client's audio as
microphone frames, the session's configuration, and how replies are paced, paused, stopped
and reported to the turn-taking (app/web/realtime_out.py) with a real `Turn` and `Conversation`.
The endpoint end to end, with the openai SDK: tests/test_realtime.py."""

from __future__ import annotations

import asyncio
import base64
import json
import math

import numpy as np
import pytest

from app.config import AppConfig
from app.core.conversation import Conversation
from app.core.session import Session
from app.core.turn import Turn
from app.messages import MicBytes, SpeechChunk
from app.metrics import TurnMetrics
from app.stages.endofturn import TurnConfig, TurnDetector
from app.stages.llm import Endpoint
from app.web.realtime import key_refusal
from app.web.realtime_audio import (
    FORMATS,
    PCM,
    FormatError,
    InputFrames,
    alaw_to_pcm,
    parse_format,
    pcm_to_alaw,
    pcm_to_ulaw,
    ulaw_to_pcm,
)
from app.web.realtime_out import RealtimeOut
from app.web.realtime_protocol import IGNORED_SESSION_FIELDS, ProtocolError, SessionConfig
from app.web.realtime_reply import DELTA_S, LEAD_S, Reply
from app.web.transport import FrameDecoder
from tests.conftest import ROOT


def test_g711_is_the_reference_codec():
    audioop = pytest.importorskip("audioop")  # Python's own G.711, until 3.13
    every = np.arange(-32768, 32768, dtype=np.int16).tobytes()
    assert pcm_to_ulaw().tobytes() == audioop.lin2ulaw(every, 2)
    assert pcm_to_alaw().tobytes() == audioop.lin2alaw(every, 2)
    assert ulaw_to_pcm().astype("<i2").tobytes() == audioop.ulaw2lin(bytes(range(256)), 2)
    assert alaw_to_pcm().astype("<i2").tobytes() == audioop.alaw2lin(bytes(range(256)), 2)


def test_formats_are_the_protocol_s():
    assert parse_format({"type": "audio/pcm", "rate": 24000}) is PCM
    assert parse_format({"type": "audio/pcmu"}).rate == 8000
    with pytest.raises(FormatError, match="24000 Hz only"):
        parse_format({"type": "audio/pcm", "rate": 16000})
    with pytest.raises(FormatError, match="audio/pcm, audio/pcmu, audio/pcma"):
        parse_format({"type": "audio/opus"})
    tone = (np.sin(np.arange(800) / 8000 * 2 * np.pi * 440) * 8000).astype(np.int16)
    for fmt in FORMATS.values():  # a round trip keeps the wave (G.711's steps aside)
        back = np.frombuffer(fmt.to_pcm16(fmt.from_pcm16(tone)), "<i2")
        assert np.abs(back.astype(int) - tone).max() < 300, fmt.type


def test_appended_audio_becomes_the_page_s_frames():
    frames = InputFrames()
    pcm = np.zeros(2400 + 100, np.int16).tobytes()  # 100 ms and a bit, at 24 kHz
    cut = frames.cut(pcm, 24000, 1000.0)
    assert len(cut) == 5  # whole 20 ms frames; the bit waits for the next append
    decoder = FrameDecoder()
    decoded = [decoder.decode(MicBytes(f, 1.0)) for f in cut]
    assert [f.captured_ms for f in decoded] == [920.0, 940.0, 960.0, 980.0, 1000.0]
    assert sum(len(f.pcm) for f in decoded) <= 1600  # resampled to 16 kHz, as the page's
    # sent faster than it plays: squeezed, never stamped later than it came nor backwards
    later = frames.cut(np.zeros(4800, np.int16).tobytes(), 24000, 1005.0)
    times = [decoder.decode(MicBytes(f, 1.0)).captured_ms for f in later]
    assert times == [1000.0] * 9 + [1005.0]
    assert frames.clock.position(1005.0) == 300 and frames.clock.position(905.0) == 200


def test_a_session_update_applies_whole_or_not_at_all():
    c = SessionConfig()
    c = c.update({"type": "realtime", "instructions": "Be brief.", "unknown": 1,
                  "audio": {"input": {"format": {"type": "audio/pcmu"},
                                      "turn_detection": {"type": "semantic_vad",
                                                         "eagerness": "high"}},
                            "output": {"format": {"type": "audio/pcma"}, "voice": "marin"}}})
    assert (c.instructions, c.input_format.type, c.output_format.type, c.turn_detection,
            c.voice) == ("Be brief.", "audio/pcmu", "audio/pcma", "semantic_vad", "marin")
    assert c.update({"audio": {"input": {"turn_detection": None}}}).turn_detection is None
    refused = [{"audio": {"input": {"turn_detection": {"type": "server_vad",
                                                       "create_response": False}}}},
               {"output_modalities": ["text", "audio"]}, {"tools": [{"type": "function"}]},
               {"type": "transcription"},
               {"instructions": "x", "audio": {"output": {"format": {"type": "audio/pcm",
                                                                     "rate": 16000}}}}]
    for update in refused:
        with pytest.raises(ProtocolError):
            c.update(update)
    assert c.instructions == "Be brief."  # nothing of a refused update was applied


def test_the_docs_name_every_ignored_field():
    doc = (ROOT / "docs" / "REALTIME.md").read_text()
    missing = [f for f in IGNORED_SESSION_FIELDS if f"`{f}`" not in doc]
    assert not missing, missing


def test_the_key_is_asked_for_wherever_credentials_are():
    cfg = AppConfig(primary=Endpoint("primary", "http://127.0.0.1:9/v1", "m"))
    assert key_refusal("", cfg) == ""  # a loopback app with no login: open
    cfg.auth = ("ann", "pw")
    assert "off" in key_refusal("Bearer anything", cfg)
    cfg.realtime_key = "k3y"
    assert key_refusal("Bearer k3y", cfg) == "" and key_refusal("bearer k3y", cfg) == ""
    assert "wrong" in key_refusal("Bearer k3", cfg) and "wrong" in key_refusal("k3y", cfg)


def test_the_key_is_read_from_the_environment_and_never_shown(monkeypatch):
    from app.ops.cli import from_args, parser

    monkeypatch.setenv("VOICE_AGENT_REALTIME_KEY", "s3cret-k3y")
    cfg = from_args(parser().parse_args([]))
    assert cfg.realtime_key == "s3cret-k3y" and "s3cret-k3y" not in repr(cfg)


def test_what_was_heard_is_each_piece_s_share():
    r = Reply("resp", "item", pieces={0: 1000.0, 1: 500.0, 3: 400.0})
    assert r.heard(1200.0) == (1.0, 0.4, 0.0, 0.0)
    assert r.heard(1900.0) == (1.0, 1.0, 1.0, 1.0)  # piece 2 failed: heard, as 3 was


# --- a reply through the real Turn, paced, paused, stopped -------------------------------------
class Reports:
    """The turn-taking queue's end of the reports (the Listener's `put`): kept, and handed
    to the conversation as its thread would."""

    def __init__(self, conversation: Conversation, session: Session) -> None:
        self.items = []
        self.conversation, self.session = conversation, session

    def put(self, item) -> None:
        self.items.append(item)
        self.conversation.on_report(self.session, item)

    def kinds(self) -> list[str]:
        return [r.kind for r in self.items]


class Agent:
    """The core's side of the agent: turns are made, their chain not run."""

    ab = None  # no A/B anchor

    def __init__(self) -> None:
        self.cfg = AppConfig(primary=Endpoint("primary", "http://127.0.0.1:9/v1", "m"))
        self.detector = TurnDetector(TurnConfig("off"), self.cfg.vad.silence_ms)

    def new_turn(self, session: Session, source: str, last_voiced_ms=None) -> Turn:
        return Turn(session, TurnMetrics(session.new_turn_id(), "primary", source=source),
                    last_voiced_ms)

    def run_turn(self, turn: Turn, audio=None, text: str = "", heard=None, later=None) -> None:
        pass


@pytest.fixture(params=[False])
def reply(request):
    """A published voice turn of a Realtime session, its outbox, and what reached the
    client (event types, and the events by type)."""
    loop = asyncio.new_event_loop()
    conversation = Conversation(Agent())  # type: ignore[arg-type]
    session = Session("s", channel="realtime")
    config = SessionConfig(text_only=request.param)
    out = RealtimeOut(loop, session, conversation, lambda: config)
    out.listener = reports = Reports(conversation, session)
    session.outbox = out
    turn = Turn(session, TurnMetrics(session.new_turn_id(), "primary", source="realtime-voice"),
                last_voiced_ms=0.0)
    conversation.floor(session).turns[turn.turn_id] = turn
    turn.commit("test")
    turn.set_user_text("What is the capital of France?")
    events: list[dict] = []

    def run(seconds: float = 0.0) -> list[str]:
        loop.run_until_complete(asyncio.sleep(seconds))
        while not out.queue.empty():
            events.append(json.loads(out.queue.get_nowait()[0]))
        return [e["type"] for e in events]

    yield turn, out, reports, run, events
    loop.close()


def speak(turn: Turn, seconds: float, index: int = 0, text: str = "Paris.") -> None:
    turn.add_reply(text + " ")
    pcm = (np.sin(np.arange(int(22050 * seconds)) / 22050 * 2 * np.pi * 200) * 9000)
    turn.emit_audio(SpeechChunk(turn.turn_id, index, pcm.astype(np.int16), 22050, text,
                                "piper", 0.0))


def audio_ms(events: list[dict]) -> float:
    return sum(len(base64.b64decode(e["delta"])) for e in events
               if e["type"] == "response.output_audio.delta") / 48.0


def test_a_reply_goes_out_as_it_plays_and_is_reported_done(reply):
    turn, out, reports, run, events = reply
    kinds = run()
    assert kinds[:4] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                         "input_audio_buffer.committed", "conversation.item.added"]
    assert "conversation.item.input_audio_transcription.completed" in kinds
    assert kinds.index("response.created") > kinds.index("conversation.item.done")
    speak(turn, 1.0)
    run(0.3)
    # paced: what was sent is what has played, and no more than the lead beyond it
    assert 0.3 + LEAD_S - DELTA_S <= audio_ms(events) / 1000 <= 0.3 + LEAD_S + 2 * DELTA_S
    assert reports.kinds() == ["audible"]
    turn.finish()  # the core's end: sent after the audio
    kinds = run(0.5)
    assert "response.done" not in kinds  # the last of it has not played yet
    kinds = run(0.4)
    assert reports.kinds() == ["audible", "done"] and reports.items[1].heard == (1.0,)
    done = next(e for e in events if e["type"] == "response.done")["response"]
    assert done["status"] == "completed" and abs(audio_ms(events) - 1000) < 1
    assert done["output"][0]["content"][0]["transcript"] == "Paris."
    assert kinds.index("response.output_audio_transcript.delta") < \
        kinds.index("response.output_audio.delta")
    turn.chain_over()
    assert turn.metrics.final  # the client's player had its say: the records are final


def test_a_pause_holds_the_deltas_and_a_stop_truncates_to_what_played(reply):
    turn, out, reports, run, events = reply
    speak(turn, 2.0)
    run(0.4)
    out.send_json({"type": "pause", "turn": turn.turn_id, "cause_ms": 123.0})
    run(0.0)
    sent = audio_ms(events)
    kinds = run(0.5)
    assert audio_ms(events) == sent  # held back while the words are checked
    assert "input_audio_buffer.speech_started" in kinds[kinds.index("response.created"):]
    assert reports.kinds() == ["audible", "paused"]
    assert reports.items[1].t_ms <= reports.items[0].t_ms + (0.4 + LEAD_S + DELTA_S) * 1000
    out.send_json({"type": "resume", "turn": turn.turn_id})
    run(0.3)
    assert audio_ms(events) > sent
    out.send_json({"type": "stop", "turn": turn.turn_id, "cause_ms": 456.0})
    kinds = run(0.0)
    stopped = reports.items[-1]
    assert stopped.kind == "stopped" and stopped.cause_ms == 456.0
    done = next(e for e in events if e["type"] == "response.done")["response"]
    assert done["status"] == "cancelled"
    assert done["status_details"]["reason"] == "turn_detected"
    cut = next(e for e in events if e["type"] == "conversation.item.truncated")
    played = cut["audio_end_ms"]
    assert 600 <= played <= audio_ms(events) and math.isclose(stopped.heard[0], played / 2000,
                                                                abs_tol=0.01)
    speak(turn, 0.5, index=1)  # a stopped reply's audio still under way: dropped
    assert audio_ms(events) == audio_ms(run(0.1) and events)


@pytest.mark.parametrize("reply", [True], indirect=True)
def test_a_text_only_session_gets_the_words_and_no_audio(reply):
    turn, out, reports, run, events = reply
    speak(turn, 1.0)
    speak(turn, 0.5, index=1, text="It is big.")
    turn.finish()
    kinds = run(0.0)
    assert "response.output_audio.delta" not in kinds
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == \
        ["Paris. ", "It is big. "]
    done = next(e for e in events if e["type"] == "response.done")["response"]
    assert done["output"][0]["content"][0] == {"type": "output_text", "text": "Paris. It is big."}
    assert reports.kinds() == ["done"]  # nothing was heard: no "audible"


def test_the_client_hears_of_the_users_voice_as_the_core_applies_it():
    """speech_started and speech_stopped come from the core as it applies the endpointer's
    events, not from a look at its state when the next frame arrives."""
    from app.messages import VadEvent

    loop = asyncio.new_event_loop()
    conversation = Conversation(Agent())  # type: ignore[arg-type]
    session = Session("s", channel="realtime")
    out = RealtimeOut(loop, session, conversation, lambda: SessionConfig())
    session.outbox = out

    def sent() -> list[str]:
        loop.run_until_complete(asyncio.sleep(0))
        return [json.loads(out.queue.get_nowait()[0])["type"] for _ in range(out.queue.qsize())]

    try:
        voiced = np.zeros(8000, np.float32)
        conversation.on_vad(session, VadEvent("speech_start", 1300.0, voiced, 300.0, 1300.0))
        assert sent() == ["input_audio_buffer.speech_started"]
        conversation.on_vad(session, VadEvent("end", 2000.0, voiced, 1000.0, 2400.0))
        assert "input_audio_buffer.speech_stopped" in sent()
    finally:
        loop.close()
