import numpy as np
import pytest

from app.audio import AudioInputError, check_length, resample, rms_dbfs, to_mono_float


def test_int16_stereo_to_mono_float():
    x = np.array([[32767, -32768], [0, 0], [16384, 16384]], dtype=np.int16)
    y = to_mono_float(x)
    assert y.dtype == np.float32 and y.shape == (3,)
    assert abs(y[2] - 0.5) < 1e-3 and abs(y[0]) < 1e-3


def test_resample_keeps_duration_and_pitch():
    t = np.arange(48000) / 48000
    tone = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    for src in (48000, 44100, 22050):
        x = np.sin(2 * np.pi * 440 * np.arange(src) / src).astype(np.float32)
        y = resample(x, src, 16000)
        assert abs(len(y) - 16000) <= 1
        spectrum = np.abs(np.fft.rfft(y))
        assert abs(np.argmax(spectrum) - 440) <= 2  # 1 Hz bins for a 1 s signal
    assert resample(tone, 16000, 16000) is not None


def test_length_limits():
    with pytest.raises(AudioInputError, match="empty"):
        check_length(np.zeros(100, np.float32), 30)
    with pytest.raises(AudioInputError, match="limit is 30 s"):
        check_length(np.zeros(16000 * 31, np.float32), 30)


def test_rms():
    assert rms_dbfs(np.zeros(10, np.int16)) == -120.0
    assert -7 < rms_dbfs((np.ones(100) * 16384).astype(np.int16)) < -5
