import numpy as np
import pytest
import soundfile as sf

from app.messages import MicFrame
from app.stages.vad import Endpointer, VadConfig, has_speech
from tests.conftest import ASSETS

pytestmark = pytest.mark.integration


def feed(endpointer: Endpointer, audio: np.ndarray, frame_ms: int = 20):
    """16 kHz audio as the page sends it: 20 ms frames stamped with their last sample's time."""
    step = 16 * frame_ms
    events = []
    for i in range(0, len(audio) - step + 1, step):
        t_ms = (i + step) / 16.0
        for e in endpointer.feed(MicFrame(i // step, audio[i:i + step], t_ms, 0.0)):
            events.append((e, t_ms))
    return events


def clip(name: str) -> np.ndarray:
    x, _ = sf.read(ASSETS / name, dtype="float32")
    return x


def trim(x: np.ndarray) -> np.ndarray:
    loud = np.nonzero(np.abs(x) > 0.01)[0]
    return x[loud[0]:loud[-1] + 1]


def last_voiced_ms(x: np.ndarray, offset_s: float) -> float:
    """Where the clip's speech really ends (its last sample above -40 dBFS), in stream ms."""
    loud = np.nonzero(np.abs(x) > 0.01)[0]
    return (offset_s + loud[-1] / 16000) * 1000


def test_one_utterance_pause_then_end():
    speech = clip("en_capital.wav")
    audio = np.concatenate([np.zeros(8000, np.float32), speech, np.zeros(16000, np.float32)])
    cfg = VadConfig(silence_ms=400, eager_ms=128, barge_in_ms=500)
    events = feed(Endpointer(cfg), audio)
    kinds = [e.kind for e, _ in events]
    longs = [e for e, _ in events if e.kind == "speech_long"]
    assert [k for k in kinds if k != "speech_long"] == ["speech_start", "pause", "end"]
    assert kinds[0] == "speech_start" and kinds.index("speech_long") < kinds.index("pause")
    # one per barge_in_ms of voiced speech, each with the utterance so far
    assert [e.speech_ms // 500 for e in longs] == list(range(1, len(longs) + 1))
    assert all(len(b.audio) > len(a.audio) for a, b in zip(longs, longs[1:], strict=False))
    true_end = last_voiced_ms(speech, 0.5)
    (pause, paused_at), = [(e, t) for e, t in events if e.kind == "pause"]
    (end, ended_at), = [(e, t) for e, t in events if e.kind == "end"]
    # both carry the last voiced frame, within two Silero frames of the real end
    assert abs(end.last_voiced_ms - true_end) < 70 and pause.last_voiced_ms == end.last_voiced_ms
    # the speculation starts after the short silence, the commit after the long one
    assert 128 <= paused_at - end.last_voiced_ms <= 128 + 140
    assert 400 <= ended_at - end.last_voiced_ms <= 400 + 140
    # the same utterance, the end's with more of the silence after it
    assert 0 < len(end.audio) - len(pause.audio) <= 16 * (400 - 128 + 64)
    assert 1.0 < len(end.audio) / 16000 < len(audio) / 16000


def test_a_short_gap_resumes_the_utterance():
    a, b = trim(clip("en_hello.wav")), trim(clip("en_joke.wav"))
    gap = np.zeros(int(16000 * 0.3), np.float32)  # longer than eager_ms, shorter than the end
    audio = np.concatenate([a, gap, b, np.zeros(16000, np.float32)])
    events = feed(Endpointer(VadConfig(silence_ms=600, eager_ms=128)), audio)
    kinds = [e.kind for e, _ in events]
    assert kinds.count("end") == 1 and kinds[-1] == "end"
    assert "pause" in kinds and "resume" in kinds
    assert kinds.index("pause") < kinds.index("resume") < kinds.index("end")
    end = events[-1][0]
    assert len(end.audio) / 16000 > (len(a) + len(b)) / 16000 - 0.5  # both parts, one turn


def test_silence_noise_and_a_short_burst_make_no_turn():
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(16000 * 3) * 0.01).astype(np.float32)
    assert feed(Endpointer(VadConfig()), quiet) == []
    assert not has_speech(quiet)
    # a 150 ms burst of speech (a cough or an "mhm" is about as long) is below min_speech_ms
    burst = clip("en_joke.wav")[8000:8000 + 2400]
    audio = np.concatenate([np.zeros(8000, np.float32), burst, np.zeros(16000, np.float32)])
    assert feed(Endpointer(VadConfig(min_speech_ms=250)), audio) == []
    assert has_speech(clip("en_joke.wav"))


def test_two_utterances_in_a_row_and_speculation_off():
    a, b = clip("en_hello.wav"), clip("en_joke.wav")
    gap = np.zeros(16000, np.float32)
    events = feed(Endpointer(VadConfig(eager_ms=0, barge_in_ms=10_000)),
                  np.concatenate([a, gap, b, gap]))
    assert [e.kind for e, _ in events] == ["speech_start", "end"] * 2


@pytest.mark.parametrize("name", ["zh_pause_05.flac", "zh_pause_06.flac"])
def test_a_short_word_before_a_pause_starts_the_utterance_after_it(name):
    """"我想 … 听几首周杰伦的老歌": the voice before the pause is too short to start an
    utterance, and the utterance that follows it begins with it, not after the pause. (In
    the page the browser's processing left less of "我想" voiced than here; the start
    threshold is raised to put it below.)"""
    import json

    label = next(r for r in json.loads((ASSETS / "zh_set" / "labels.json").read_text())
                 if r["file"] == name)
    x = clip(f"zh_set/{name}")
    voice_from = np.argmax(np.abs(x) > 0.02) / 16000
    events = feed(Endpointer(VadConfig(silence_ms=400, eager_ms=128, min_speech_ms=450)),
                  np.concatenate([x, np.zeros(16000, np.float32)]))
    ends = [e for e, _ in events if e.kind == "end"]
    assert len(ends) == 1, [e.kind for e, _ in events]
    # the utterance's audio reaches back to the first word (less a frame of onset)
    assert len(ends[0].audio) / 16000 >= label["speech_end_s"] - voice_from - 0.04
