"""End-of-speech detection on a live microphone stream with Silero VAD.

Uses the Silero v6 ONNX model that faster-whisper ships, run frame by frame (32 ms) with
its recurrent state carried across calls, so each microphone chunk costs only its own
frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.config import VadConfig

FRAME = 512  # samples at 16 kHz = 32 ms, the size Silero v6 expects
CONTEXT = 64
RATE = 16000
PRE_ROLL_FRAMES = 10  # keep ~320 ms before the first speech frame


def _session():  # noqa: ANN202 - onnxruntime session, imported lazily
    from faster_whisper.vad import get_vad_model

    return get_vad_model().session


class SileroFrames:
    """Speech probability per 32 ms frame, state kept between calls."""

    def __init__(self) -> None:
        self._session = _session()
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)

    def __call__(self, frame: np.ndarray) -> float:
        x = np.concatenate([self._context, frame.astype(np.float32)])[None, :]
        out, self._h, self._c = self._session.run(None, {"input": x, "h": self._h, "c": self._c})
        self._context = frame[-CONTEXT:].astype(np.float32)
        return float(np.asarray(out).reshape(-1)[0])


@dataclass(frozen=True)
class VadEvent:
    kind: str
    """"speech_start" (the user began talking: barge-in) or "utterance" (they stopped)."""
    audio: np.ndarray | None = None
    speech_end: float = 0.0
    """For "utterance": perf_counter() estimate of the last speech frame's end."""


class StreamingVad:
    """Feed 16 kHz mono float chunks as they arrive; get speech start/end events."""

    def __init__(self, cfg: VadConfig, frames: SileroFrames | None = None) -> None:
        self.cfg = cfg
        self.frames = frames or SileroFrames()
        self._pending = np.zeros(0, dtype=np.float32)
        self._reset_state()

    def _reset_state(self) -> None:
        self._speech: list[np.ndarray] = []
        self._pre: list[np.ndarray] = []
        self._speech_frames = 0
        self._silent_frames = 0
        self._started = False

    def feed(self, chunk: np.ndarray, received_at: float) -> list[VadEvent]:
        """`received_at`: perf_counter() when the chunk arrived (its last sample's time)."""
        self._pending = np.concatenate([self._pending, chunk.astype(np.float32)])
        n_frames = len(self._pending) // FRAME
        events: list[VadEvent] = []
        frame_ms = FRAME * 1000 / RATE
        for i in range(n_frames):
            frame = self._pending[i * FRAME:(i + 1) * FRAME]
            p = self.frames(frame)
            # frames still to come after this one in the buffer, for the time estimate
            after_s = (len(self._pending) - (i + 1) * FRAME) / RATE
            if self._speech_frames == 0:
                self._pre = (self._pre + [frame])[-PRE_ROLL_FRAMES:]
                if p >= self.cfg.threshold:
                    self._speech, self._speech_frames, self._silent_frames = [frame], 1, 0
                continue
            self._speech.append(frame)
            if p >= self.cfg.threshold:
                self._speech_frames += 1
                self._silent_frames = 0
            elif p < self.cfg.threshold - 0.15:
                self._silent_frames += 1
            if not self._started and self._speech_frames * frame_ms >= self.cfg.min_speech_ms:
                self._started = True
                events.append(VadEvent("speech_start"))
            silence_ms = self._silent_frames * frame_ms
            too_long = len(self._speech) * FRAME / RATE >= self.cfg.max_utterance_s
            if silence_ms >= self.cfg.silence_ms or too_long:
                if self._started:
                    tail_s = self._silent_frames * FRAME / RATE
                    audio = np.concatenate(self._pre[:-1] + self._speech)
                    events.append(VadEvent("utterance", audio, received_at - after_s - tail_s))
                self._reset_state()
        self._pending = self._pending[n_frames * FRAME:]
        return events

    def reset(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)
        self._reset_state()
        self.frames.reset()


def has_speech(audio: np.ndarray, threshold: float = 0.5, min_speech_ms: int = 200) -> bool:
    """Whether a whole 16 kHz recording holds at least `min_speech_ms` of speech."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    stamps = get_speech_timestamps(audio, VadOptions(threshold=threshold,
                                                     min_speech_duration_ms=min_speech_ms))
    return bool(stamps)
