import numpy as np
import pytest

from app.core.wire import FRAME_HEADER
from app.messages import MicBytes
from app.stages.audio import AudioInputError, check_length, resample, rms_dbfs
from app.web.transport import FrameDecoder


def test_resample_keeps_duration_and_pitch():
    for src in (48000, 44100, 22050):
        x = np.sin(2 * np.pi * 440 * np.arange(src) / src).astype(np.float32)
        y = resample(x, src, 16000)
        assert abs(len(y) - 16000) <= 1
        spectrum = np.abs(np.fft.rfft(y))
        assert abs(np.argmax(spectrum) - 440) <= 2  # 1 Hz bins for a 1 s signal
    tone = np.ones(100, np.float32)
    assert np.array_equal(resample(tone, 16000, 16000), tone)


def test_resample_does_not_alias():
    # a 12 kHz tone is above 16 kHz's Nyquist: it must vanish, not fold down to 4 kHz
    x = np.sin(2 * np.pi * 12000 * np.arange(48000) / 48000).astype(np.float32)
    y = resample(x, 48000, 16000)[1000:-1000]
    assert rms_dbfs(y) < -80


def frame(pcm: np.ndarray, seq: int, rate: int, t_ms: float) -> bytes:
    return FRAME_HEADER.pack(t_ms, seq, rate) + pcm.astype("<i2").tobytes()


def test_microphone_frames_resample_continuously():
    """20 ms frames at 48 kHz through the streaming resampler equal the whole signal
    resampled at once: no clicks at frame edges."""
    rate, n = 48000, 960
    x = (np.sin(2 * np.pi * 300 * np.arange(rate) / rate) * 16000).astype(np.int16)
    decoder = FrameDecoder()
    frames = [decoder.decode(MicBytes(frame(x[i:i + n], i // n, rate, i / 48.0), 0.0))
              for i in range(0, len(x), n)]
    assert [f.seq for f in frames] == list(range(50))
    assert frames[-1].captured_ms == pytest.approx((len(x) - n) / 48.0)
    streamed = np.concatenate([f.pcm for f in frames])
    whole = resample(x.astype(np.float32) / 32768, rate, 16000)
    delay = len(whole) - len(streamed)  # the stream holds back its filter's latency
    assert 0 <= delay <= 120  # <= 7.5 ms
    # the streamed signal is the whole one (its tail still in the filter): no clicks at the
    # 50 frame edges
    a = streamed[400:-400]
    b = whole[400:400 + len(a)]
    assert np.max(np.abs(a - b)) < 0.01
    # and a 12 kHz tone through the stream is gone too
    tone = (np.sin(2 * np.pi * 12000 * np.arange(rate) / rate) * 16000).astype(np.int16)
    decoder = FrameDecoder()
    out = np.concatenate([decoder.decode(MicBytes(frame(tone[i:i + n], 0, rate, 0.0), 0.0)).pcm
                          for i in range(0, len(tone), n)])
    assert rms_dbfs(out[1000:-1000]) < -100


def test_malformed_frames_are_refused():
    decoder = FrameDecoder()
    with pytest.raises(ValueError, match="malformed"):
        decoder.decode(MicBytes(b"\x00" * 5, 0.0))
    with pytest.raises(ValueError, match="at most 40 ms"):
        decoder.decode(MicBytes(frame(np.zeros(48000, np.int16), 0, 48000, 0.0), 0.0))
    with pytest.raises(ValueError, match="at most 40 ms"):
        decoder.decode(MicBytes(frame(np.zeros(10, np.int16), 0, 1000, 0.0), 0.0))


def test_length_limits():
    with pytest.raises(AudioInputError, match="empty"):
        check_length(np.zeros(100, np.float32), 30)
    with pytest.raises(AudioInputError, match="limit is 30 s"):
        check_length(np.zeros(16000 * 31, np.float32), 30)


def test_rms():
    assert rms_dbfs(np.zeros(10, np.int16)) == -120.0
    assert -7 < rms_dbfs((np.ones(100) * 16384).astype(np.int16)) < -5
