import numpy as np
import pytest
import soundfile as sf

from app.config import VadConfig
from app.vad import StreamingVad, has_speech
from tests.conftest import ASSETS

pytestmark = pytest.mark.integration


def feed_in_chunks(vad: StreamingVad, audio: np.ndarray, chunk_s: float = 0.25):
    step = int(16000 * chunk_s)
    events = []
    for i in range(0, len(audio), step):
        t_end = (i + len(audio[i:i + step])) / 16000  # stream time of the chunk's last sample
        events += [(e, t_end) for e in vad.feed(audio[i:i + step], received_at=t_end)]
    return events


def test_one_utterance_with_its_end_time():
    speech, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    audio = np.concatenate([np.zeros(8000, np.float32), speech, np.zeros(16000, np.float32)])
    events = feed_in_chunks(StreamingVad(VadConfig(silence_ms=400)), audio)
    kinds = [e.kind for e, _ in events]
    assert kinds == ["speech_start", "utterance"]
    utterance, found_at = events[1]
    # the clip ends with 0.4 s of padding: speech ends ~0.4 s before the clip's end
    true_end = 0.5 + len(speech) / 16000 - 0.4
    assert abs(utterance.speech_end - true_end) < 0.25
    # found once the configured silence has passed, within one chunk of it
    assert 0.4 <= found_at - utterance.speech_end <= 0.4 + 0.25 + 0.05
    assert 1.0 < len(utterance.audio) / 16000 < len(audio) / 16000


def test_silence_and_noise_make_no_utterance():
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(16000 * 3) * 0.01).astype(np.float32)
    assert feed_in_chunks(StreamingVad(VadConfig()), quiet) == []
    assert not has_speech(quiet)
    speech, _ = sf.read(ASSETS / "en_joke.wav", dtype="float32")
    assert has_speech(speech)


def test_two_utterances_in_a_row():
    a, _ = sf.read(ASSETS / "en_hello.wav", dtype="float32")
    b, _ = sf.read(ASSETS / "en_joke.wav", dtype="float32")
    gap = np.zeros(16000, np.float32)
    events = feed_in_chunks(StreamingVad(VadConfig()), np.concatenate([a, gap, b, gap]))
    assert [e.kind for e, _ in events] == ["speech_start", "utterance"] * 2
