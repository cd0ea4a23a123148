"""Audio in and out: decode and check uploads, resample, encode PCM for the browser."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np

ASR_RATE = 16000


class AudioInputError(ValueError):
    """Input audio the agent cannot use; the message is shown to the user as is."""


def to_mono_float(samples: np.ndarray) -> np.ndarray:
    """Any int/float array, (n,) or (n, channels), -> float32 mono in [-1, 1]."""
    x = np.asarray(samples)
    scale = float(np.iinfo(x.dtype).max + 1) if np.issubdtype(x.dtype, np.integer) else 1.0
    x = x.astype(np.float32) / scale
    if x.ndim == 2:
        # Gradio gives (n, channels); a (channels, n) array has few rows and many columns
        if x.shape[0] < x.shape[1] and x.shape[0] <= 8:
            x = x.T
        x = x.mean(axis=1)
    return np.clip(x, -1.0, 1.0)


def resample(x: np.ndarray, src: int, dst: int = ASR_RATE) -> np.ndarray:
    """Resample mono float audio; integer decimation averages first (a cheap low-pass)."""
    if src == dst or len(x) == 0:
        return x.astype(np.float32)
    if src % dst == 0:
        factor = src // dst
        n = len(x) // factor * factor
        return x[:n].reshape(-1, factor).mean(axis=1).astype(np.float32)
    n_out = int(round(len(x) * dst / src))
    t_out = np.arange(n_out) * (src / dst)
    return np.interp(t_out, np.arange(len(x)), x).astype(np.float32)


def load_upload(path: str | Path, max_seconds: float, max_mb: float) -> np.ndarray:
    """Decode an uploaded file (any container PyAV reads) to 16 kHz mono, or explain why not."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        raise AudioInputError("The audio file is empty.")
    size_mb = p.stat().st_size / 1e6
    if size_mb > max_mb:
        raise AudioInputError(f"The file is {size_mb:.0f} MB; the limit is {max_mb:.0f} MB.")
    from faster_whisper.audio import decode_audio

    try:
        audio = decode_audio(str(p), sampling_rate=ASR_RATE)
    except Exception as exc:  # PyAV raises many types for non-audio input
        raise AudioInputError(f"Could not read this file as audio ({type(exc).__name__}).") \
            from exc
    return check_length(audio, max_seconds)


def check_length(audio: np.ndarray, max_seconds: float) -> np.ndarray:
    seconds = len(audio) / ASR_RATE
    if seconds < 0.1:
        raise AudioInputError("The recording is empty.")
    if seconds > max_seconds:
        raise AudioInputError(f"The recording is {seconds:.0f} s long; the limit is "
                              f"{max_seconds:.0f} s per turn. Please say it in shorter turns.")
    return audio


def float_to_pcm16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)


def pcm_b64(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")


def rms_dbfs(pcm: np.ndarray) -> float:
    x = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)
    rms = float(np.sqrt(np.mean(x * x))) if len(x) else 0.0
    return 20 * np.log10(rms) if rms > 0 else -120.0


def wav_bytes(pcm: np.ndarray, sample_rate: int) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()
