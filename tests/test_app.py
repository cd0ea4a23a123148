"""The launched app, driven through its API with gradio_client, as a script user would."""

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client, handle_file

from tests.conftest import ASSETS, TRANSCRIPTS, word_recall

pytestmark = pytest.mark.integration


@pytest.fixture
def client(app_url):
    return Client(app_url, verbose=False)


@pytest.mark.parametrize("name", ["en_capital.wav", "en_capital_48k_stereo.wav"])
def test_voice_turn_returns_transcript_reply_audio_metrics(client, name):
    transcript, reply, audio_path, metrics, = client.predict(handle_file(ASSETS / name),
                                                             api_name="/voice_turn")
    assert word_recall(TRANSCRIPTS[name], transcript) >= 0.8
    assert reply.strip()
    audio, rate = sf.read(audio_path, dtype="int16")
    assert len(audio) / rate > 0.3 and np.abs(audio).max() > 1000
    assert metrics["error"] == "" and metrics["source"] == "voice"
    for name in ("asr_ms", "ttft_ms", "ms_per_token", "llm_turn_ms", "tts_first_audio_ms"):
        assert metrics[name] > 0, name
    # edge-tts is refused (proxy on a closed port): piper spoke and the page says why
    assert metrics["tts_engine"].startswith("piper") and "edge" in metrics["tts_engine"]


def bad_files(tmp_path):
    silent = tmp_path / "silence.wav"
    sf.write(silent, np.zeros(16000 * 3, np.float32), 16000)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio at all\n" * 50)
    long = tmp_path / "ten_minutes.wav"
    rng = np.random.default_rng(0)
    sf.write(long, (rng.standard_normal(16000 * 600) * 0.05).astype(np.float32), 16000,
             subtype="PCM_16")
    huge = tmp_path / "huge.wav"  # over the 20 MB upload limit
    sf.write(huge, (rng.standard_normal(16000 * 700) * 0.05).astype(np.float32), 16000,
             subtype="PCM_16")
    return [(silent, "No speech"), (empty, "empty"), (text, "Could not read"),
            (long, "limit is 30 s"), (huge, "(?i)max.*size|too large|20 ?mb")]


def test_bad_uploads_get_clear_messages_and_keep_the_conversation(client, tmp_path):
    first = client.predict(handle_file(ASSETS / "en_hello.wav"), api_name="/voice_turn")
    assert first[1]
    for path, message in bad_files(tmp_path):
        with pytest.raises(Exception, match=message):
            client.predict(handle_file(path), api_name="/voice_turn")
    # the conversation goes on in the same session: turn ids continue, history is sent
    after = client.predict(handle_file(ASSETS / "en_joke.wav"), api_name="/voice_turn")
    assert after[3]["turn_id"] == first[3]["turn_id"] + 1
    assert after[3]["prompt_tokens"] > first[3]["prompt_tokens"]


def test_text_turn_and_empty_text(client):
    assert client.predict("Hello there!", api_name="/text_turn") == ""
    with pytest.raises(Exception, match="Type something"):
        client.predict("   ", api_name="/text_turn")


def test_sessions_are_separate(app_url):
    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    ra = a.predict(handle_file(ASSETS / "en_hello.wav"), api_name="/voice_turn")
    rb = b.predict(handle_file(ASSETS / "en_hello.wav"), api_name="/voice_turn")
    assert ra[3]["turn_id"] == rb[3]["turn_id"] == 1
    assert ra[3]["prompt_tokens"] == rb[3]["prompt_tokens"]  # neither saw the other's turn


def test_ab_records_and_export_round_trip(client):
    from app.metrics import from_json

    for name in ("en_hello.wav", "en_weather.wav"):
        client.predict(handle_file(ASSETS / name), api_name="/voice_turn")
    rows = from_json(open(client.predict(api_name="/export_json"), encoding="utf-8").read())
    assert [(r.turn_id, r.endpoint) for r in rows] == [
        (1, "primary"), (1, "anchor"), (2, "primary"), (2, "anchor")]
    for r in rows:
        assert not r.error and r.ttft_ms > 0 and r.ms_per_token > 0 and r.server_ttft_ms > 0
    assert {r.order for r in rows} == {"primary", "after-primary"}
    assert rows[0].prompt_tokens == rows[1].prompt_tokens  # same messages to both
    import csv

    with open(client.predict(api_name="/export_csv"), encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert [(int(r["turn_id"]), r["endpoint"]) for r in table] == [
        (r.turn_id, r.endpoint) for r in rows]
    assert float(table[0]["ttft_ms"]) == rows[0].ttft_ms
    assert "EMPTY" not in open(client.predict(api_name="/export_json")).read()
