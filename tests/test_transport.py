"""The page's audio channel, driven by a WebSocket client as the page drives it: 20 ms
microphone frames up, reply audio and the player's reports down, into the launched app
(real VAD, ASR, vLLM, TTS)."""

import json
import time
import urllib.request
import uuid

import numpy as np
import pytest
import soundfile as sf

from app.audio import resample
from app.session import AUDIO_HEADER
from app.transport import FRAME_HEADER
from tests.conftest import ASSETS

pytestmark = pytest.mark.integration


def frames(audio16k: np.ndarray, start_ms: float, rate: int = 48000):
    """48 kHz int16 frames of 20 ms with the browser time of each frame's last sample."""
    x = (resample(audio16k, 16000, rate) * 32767).astype("<i2")
    n = rate // 50
    for i in range(0, len(x) - n + 1, n):
        t = start_ms + (i + n) / rate * 1000
        yield FRAME_HEADER.pack(t, i // n, rate) + x[i:i + n].tobytes()


def test_spoken_turn_over_the_socket(app_url):
    from websockets.sync.client import connect

    sid = uuid.uuid4().hex
    speech, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    audio = np.concatenate([np.zeros(8000, np.float32), speech, np.zeros(16000, np.float32)])
    url = app_url.replace("http", "ws") + f"agent/ws/{sid}"
    got_audio, events = [], []
    with connect(url, max_size=None) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        ws.send(b"\x01\x02\x03")  # a malformed frame is refused with a message
        t0 = time.perf_counter() * 1000
        for f in frames(audio, t0):  # paced as a microphone: 20 ms of audio every 20 ms
            ws.send(f)
            time.sleep(max(0.0, (FRAME_HEADER.unpack_from(f)[0] - time.perf_counter() * 1000)
                           / 1000))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(e.get("type") == "end" for e in events):
            msg = ws.recv(timeout=90)
            if isinstance(msg, bytes):
                turn, index, rate, _ = AUDIO_HEADER.unpack_from(msg)
                got_audio.append((turn, index, rate, np.frombuffer(msg, "<i2",
                                                                    offset=AUDIO_HEADER.size)))
                if len(got_audio) == 1:  # tell the app when it became audible, as the page does
                    now = time.perf_counter() * 1000
                    ws.send(json.dumps({"type": "audible", "turn": turn, "t_ms": now + 40,
                                        "received_ms": now}))
            else:
                events.append(json.loads(msg))
    assert {"type": "error", "message": "malformed microphone frame"} in events
    turns = {t for t, *_ in got_audio}
    assert len(turns) == 1  # one reply (a speculation the user talked over takes an id too)
    assert [i for _, i, _, _ in got_audio] == list(range(len(got_audio)))  # pieces in order
    assert all(r == 22050 for _, _, r, _ in got_audio)  # piper's rate
    assert np.abs(np.concatenate([a for *_, a in got_audio])).max() > 1000
    with urllib.request.urlopen(f"{app_url}agent/export/{sid}.json", timeout=10) as resp:
        rows = json.loads(resp.read())
    row = next(r for r in rows if r["endpoint"] == "primary")
    assert row["turn_id"] in turns and row["source"] == "voice" and not row["error"], row
    # voice-to-voice from the last voiced frame, on the client's clock: at least the
    # end-of-turn silence it waited for
    assert 400 <= row["v2v_ms"] < 20000
    line = row["timeline"]
    assert line["asr_start"] < line["committed"] or line["asr_start"] < line["asr_end"]
    assert line["committed"] >= 400 and line["first_sent"] >= line["committed"]
    assert row["eot_wait_ms"] >= 400 and row["asr_after_speech_ms"] > 0
