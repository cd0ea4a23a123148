"""End of turn on a live microphone: Silero VAD per `FRAME` of samples, and the endpointer.

Silero v6 (the ONNX model faster-whisper ships) runs frame by frame with its recurrent
state carried across calls, so each microphone frame costs only its own samples. The
endpointer turns speech probabilities into turn events: `speech_start` once enough speech
came, `pause` after a short silence (the turn starts speculatively: ASR, model and TTS
run while the user might still go on), `resume` if they do go on (the speculation is
dropped), and `end` once the silence is long enough (the turn is committed and its audio
released). Every event carries the browser time of the last voiced frame, so latency
counts from what the user did, not from when the server noticed. Voice too short to start
an utterance is kept a while: a word said before a pause ("我想 …", "So …") is the start of
the utterance that follows it, not lost.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from app.messages import RATE, MicFrame, VadEvent, VadKind


@dataclass
class VadConfig:
    threshold: float = 0.5
    """Silero speech probability above which a VAD frame counts as speech."""
    silence_ms: int = 400
    """Trailing silence that ends an utterance."""
    min_speech_ms: int = 250
    """Shorter bursts (clicks, coughs) are not utterances."""
    eager_ms: int = 64
    """Trailing silence after which the turn starts speculatively (ASR, model and TTS run;
    the audio is held until the end of the turn is decided, and dropped if the user goes
    on). 0 turns speculation off. With ASR on a GPU the default is `app.ops.cli.GPU_EAGER_MS`. On
    the CPU this default, against twice it, ends finished questions sooner after the last voiced
    frame at no cost at the ear and none in WER, which the start does not move
    (`python -m bench.wer.endpointer_cut`; docs/PERFORMANCE.md)."""
    model_after_ms: int = 128
    """Trailing silence after which a speculative turn sends its model request (at or
    below `eager_ms`: as soon as its transcript is known), so that a short gap between
    words costs ASR only. With ASR on a GPU the default is `app.ops.cli.GPU_MODEL_AFTER_MS`. Many
    callers on one GPU: a later request lowers voice-to-voice p50 at many conversations and
    raises it for one (docs/PERFORMANCE.md, "the model request after a longer silence"). On
    the CPU a decode takes longer than `eager_ms`, so a request after a whole word goes with
    its transcript all the same."""
    barge_in_ms: int = 500
    """While the agent speaks, each this much of the user's speech pauses the reply and
    checks the words (app/core/conversation.py): a command ("wait", "stop") interrupts at once,
    other words if the user goes on talking over the paused reply for as long again; a
    cough or an "mhm" is shorter. When the agent is silent, `min_speech_ms` starts a turn."""
    max_utterance_s: float = 30.0
    """An utterance is cut here even if the user keeps talking."""


FRAME = 512  # samples at 16 kHz, the size Silero v6 expects
FRAME_MS = FRAME * 1000 / RATE
CONTEXT = 64
PRE_ROLL_FRAMES = 10  # keep this many frames before the first speech frame
LEAD_IN_MS = 1200
"""A burst of voice too short to start an utterance ("我想", "So") and followed by a pause
no longer than this becomes the start of the utterance that follows it."""
LEAD_IN_FRAMES = round(2 * LEAD_IN_MS / FRAME_MS)  # the most of it kept
HYSTERESIS = 0.15  # a frame is silent below threshold - this (Silero's own default)


def _session():  # onnxruntime session, imported lazily
    from faster_whisper.vad import get_vad_model

    return get_vad_model().session


class SileroFrames:
    """Speech probability per `FRAME` of samples, state kept between calls."""

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


class Endpointer:
    """Feed `MicFrame`s as they arrive; get `VadEvent`s."""

    def __init__(self, cfg: VadConfig, frames: SileroFrames | None = None) -> None:
        self.cfg = cfg
        self.frames = frames or SileroFrames()
        self._pending = np.zeros(0, dtype=np.float32)
        self._pending_end_ms = 0.0
        self._reset_state()

    def _reset_state(self) -> None:
        self._speech: list[np.ndarray] = []
        self._pre: deque[np.ndarray] = deque(maxlen=PRE_ROLL_FRAMES)
        self._lead: list[np.ndarray] = []  # the audio before the first voiced frame
        self._held: list[np.ndarray] | None = None  # a short burst and the silence after it
        self._held_silent = 0
        self._voiced = 0
        self._silent = 0
        self._started = False
        self._paused = False
        self._next_long = self.cfg.barge_in_ms
        self._last_voiced_ms = 0.0
        self.end_after_ms = self.cfg.silence_ms
        """Silence that ends this utterance: the turn-taking raises it while it waits for
        the end-of-turn decision (app/core/conversation.py)."""
        self.start_after_ms = self.cfg.min_speech_ms
        """Voice that starts an utterance: the turn-taking lowers it while none of a reply
        it committed has gone to the page (app/core/conversation.py)."""

    @property
    def busy(self) -> bool:
        """Speech has been heard since the last utterance ended (or was closed)."""
        return self._voiced > 0

    @property
    def quiet_ms(self) -> float | None:
        """Silence since the last voiced frame heard since the last utterance ended (or was
        closed), even one too short to start an utterance; None if none was heard."""
        return self._silent * FRAME_MS if self._voiced else None

    @property
    def silence_ms(self) -> float:
        """Silence since the utterance's last voiced frame (0 outside an utterance)."""
        return self._silent * FRAME_MS if self._started else 0.0

    def close(self) -> None:
        """The turn-taking decided that the utterance is over: speech from here on is a new
        one (its `speech_start`), and no `end` comes for this one."""
        self._reset_state()

    def feed(self, frame: MicFrame) -> list[VadEvent]:
        self._pending = np.concatenate([self._pending, frame.pcm.astype(np.float32)])
        self._pending_end_ms = frame.captured_ms
        n = len(self._pending) // FRAME
        events: list[VadEvent] = []
        for i in range(n):
            window = self._pending[i * FRAME:(i + 1) * FRAME]
            end_ms = self._pending_end_ms - (len(self._pending) - (i + 1) * FRAME) / RATE * 1000
            events += self._step(window, self.frames(window), end_ms)
        self._pending = self._pending[n * FRAME:]
        return events

    def _step(self, window: np.ndarray, p: float, end_ms: float) -> list[VadEvent]:
        cfg = self.cfg
        if self._voiced == 0:
            self._pre.append(window)
            if self._held is not None:
                self._held.append(window)
                self._held_silent += 1
            if p >= cfg.threshold:
                self._speech, self._voiced, self._silent = [window], 1, 0
                self._lead = (self._held or [*self._pre])[:-1]
                self._held = None
                self._last_voiced_ms = end_ms
            elif self._held is not None and self._held_silent * FRAME_MS > LEAD_IN_MS:
                self._held = None
            return []
        self._speech.append(window)
        events = []
        if p >= cfg.threshold:
            self._voiced += 1
            self._silent = 0
            self._last_voiced_ms = end_ms
            if self._paused:
                self._paused = False
                events.append(self._event("resume", end_ms))
        elif p < cfg.threshold - HYSTERESIS:
            self._silent += 1
        speech_ms = self._voiced * FRAME_MS
        if not self._started and speech_ms >= self.start_after_ms:
            self._started = True
            events.append(self._event("speech_start", end_ms))
        if self._started and speech_ms >= self._next_long:
            # every barge_in_ms of speech: the agent, if it speaks, checks the words so far
            self._next_long += cfg.barge_in_ms
            events.append(self._event("speech_long", end_ms, with_audio=True))
        silence_ms = self._silent * FRAME_MS
        too_long = len(self._speech) * FRAME / RATE >= cfg.max_utterance_s
        if cfg.eager_ms and self._started and not self._paused and self._silent \
                and silence_ms >= cfg.eager_ms and not too_long:
            self._paused = True
            events.append(self._event("pause", end_ms, with_audio=True))
        if silence_ms >= self.end_after_ms or too_long:
            if self._started:
                events.append(self._event("end", end_ms, with_audio=True))
                self._reset_state()
            else:  # a burst shorter than min_speech_ms: the lead-in of what may follow
                held, silent = [*self._lead, *self._speech], self._silent
                self._reset_state()  # bursts and gaps come and go: the latest are kept
                self._held, self._held_silent = held[-LEAD_IN_FRAMES:], silent
        return events

    def _event(self, kind: VadKind, end_ms: float, with_audio: bool = False) -> VadEvent:
        audio = None
        if with_audio:
            # the utterance with the pre-roll before it and the silence after it: Whisper
            # loses soft word endings ("colors" -> "color") when cut at the last voiced frame
            audio = np.concatenate([*self._lead, *self._speech])
        return VadEvent(kind, self._last_voiced_ms, audio, self._voiced * FRAME_MS, end_ms)

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
