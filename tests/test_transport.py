"""The page's audio channel, driven by `app.client.VoiceClient` as the page drives it: 20 ms
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

from app.client import VoiceClient
from tests.conftest import ASSETS

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
    # voice-to-voice from the last voiced frame, on the client's clock: at least the
    # end-of-turn silence it waited for
    assert 400 <= row["v2v_ms"] < 20000
    line = row["timeline"]
    assert line["asr_start"] < line["committed"] or line["asr_start"] < line["asr_end"]
    assert line["committed"] >= 400 and line["first_sent"] >= line["committed"]
    # the event loop's write of the first audio is on the timeline, before the client has it
    assert line["first_sent"] <= line["socket_sent"] <= line["received"] + 1.0
    assert row["eot_wait_ms"] >= 400 and row["asr_after_speech_ms"] > 0


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
