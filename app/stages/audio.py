"""Audio in and out: decode and check uploads, resample, encode PCM for the browser."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from app.messages import RATE


class AudioInputError(ValueError):
    """Input audio the agent cannot use; the message is shown to the user as is."""


def resample(x: np.ndarray, src: int, dst: int = RATE) -> np.ndarray:
    """Resample mono float audio with soxr (band-limited: no aliasing)."""
    import soxr

    if src == dst or len(x) == 0:
        return x.astype(np.float32)
    return soxr.resample(x.astype(np.float32), src, dst, quality="HQ")


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
        audio = decode_audio(str(p), sampling_rate=RATE)
    except Exception as exc:  # PyAV raises many types for non-audio input
        raise AudioInputError(f"Could not read this file as audio ({type(exc).__name__}).") \
            from exc
    return check_length(audio, max_seconds)


def check_length(audio: np.ndarray, max_seconds: float) -> np.ndarray:
    seconds = len(audio) / RATE
    if seconds < 0.1:
        raise AudioInputError("The recording is empty.")
    if seconds > max_seconds:
        raise AudioInputError(f"The recording is {seconds:.0f} s long; the limit is "
                              f"{max_seconds:.0f} s per turn. Please say it in shorter turns.")
    return audio


def rms_dbfs(pcm: np.ndarray) -> float:
    x = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)
    rms = float(np.sqrt(np.mean(x * x))) if len(x) else 0.0
    return 20 * np.log10(rms) if rms > 0 else -120.0


def wav_bytes(pcm: np.ndarray, sample_rate: int) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def keep_heard(folder: Path, stem: str, audio: np.ndarray, text: str, language: str,
               score: float) -> None:
    """`audio` (16 kHz float) as `folder/stem.wav`, and its transcript as a line of
    `folder/heard.tsv` (file, language, the decoder's mean log-probability, text)."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    sf.write(folder / f"{stem}.wav", audio, RATE, subtype="FLOAT")
    line = "\t".join([f"{stem}.wav", language, f"{score:.3f}",
                      " ".join(text.split())])  # one line, whatever the text holds
    with open(folder / "heard.tsv", "a", encoding="utf-8") as f:
        f.write(line + "\n")
