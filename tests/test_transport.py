"""The page's audio channel, driven by `app.web.client.VoiceClient` as the page drives it: 20 ms
microphone frames up, reply audio and the player's reports down, into the launched app
(real VAD, ASR, vLLM, TTS)."""

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from app.stages.vad import VadConfig
from app.web.client import VoiceClient
from tests.conftest import APP_LOG, ASSETS, app_log, log_lines

pytestmark = pytest.mark.integration


def test_spoken_turn_over_the_socket(app_url):
    speech, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    with VoiceClient(app_url) as client:
        client.send_raw(b"\x01\x02\x03")  # a malformed frame is refused with a message
        reply = client.say(speech)
        rows = client.export()
    assert {"type": "error", "message": "malformed microphone frame"} in reply.events
    # one reply, its pieces in order, piper's rate, audible
    assert reply.turn > 0 and reply.rate == 22050
    assert np.abs(reply.audio).max() > 1000
    row = next(r for r in rows if r["endpoint"] == "primary" and r["turn_id"] == reply.turn)
    assert row["source"] == "voice" and not row["error"], row
    # voice-to-voice from the last voiced frame, on the client's clock: the turn ends at
    # the verdict on its words, not before the speculative start's silence; its audio after
    line = row["timeline"]
    assert VadConfig.eager_ms <= line["committed"] <= row["v2v_ms"] < 20000
    assert line["asr_start"] < line["committed"] or line["asr_start"] < line["asr_end"]
    assert line["first_sent"] >= line["committed"]
    # the event loop's write of the first audio is on the timeline, before the client has it
    assert line["first_sent"] <= line["socket_sent"] <= line["received"] + 1.0
    assert row["eot_wait_ms"] >= VadConfig.eager_ms and row["asr_after_speech_ms"] > 0


def test_only_issued_session_ids_are_served(app_url):
    """A made-up id gets a message and a close, not a session of its own."""
    url = app_url.replace("http", "ws") + "agent/ws/made-up-by-the-client"
    with connect(url) as ws:
        msg = json.loads(ws.recv(timeout=10))
        assert msg["type"] == "error" and "unknown session" in msg["message"]
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert ws.close_code == 4404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(app_url + "agent/export/made-up-by-the-client.json", timeout=10)
    assert err.value.code == 404


def test_words_over_the_reply_stop_it_and_get_their_own(app_url):
    """A script that talks over the reply is answered as the page is: the app stops the
    first reply, the client reports it stopped (with the cause, so the record has its
    interrupt-to-silence), and the words said over it get a reply of their own."""
    first, _ = sf.read(ASSETS / "en_joke.wav", dtype="float32")
    over, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    since = log_lines(APP_LOG)
    with VoiceClient(app_url) as client:
        reply = client.say(first, over=over, timeout_s=120)
        rows = client.export()
    assert len(reply.stopped) == 1 and reply.turn > reply.stopped[0], \
        "\n".join([f"events: {reply.events}", *app_log(APP_LOG, since)])
    assert {"type": "stop", "turn": reply.stopped[0]}.items() <= \
        next(e for e in reply.events if e["type"] == "stop").items()
    assert np.abs(reply.audio).max() > 1000
    mine = {r["turn_id"]: r for r in rows if r["endpoint"] == "primary"}
    cut, answer = mine[reply.stopped[0]], mine[reply.turn]
    assert cut["cancelled"] and cut["interrupt_ms"] is not None and cut["interrupt_ms"] >= 0
    assert not answer["error"] and not answer["cancelled"], answer
