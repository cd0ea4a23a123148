"""Typed messages between the stages of a turn, in the order they flow.

Server times are `time.perf_counter()` seconds; browser times are the page's
`performance.now()` milliseconds (suffix `_ms`), the clock of the user's microphone and
speaker. `app/clock.py` maps one onto the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

RATE = 16000
"""Audio between the stages is 16 kHz mono (the microphone's is resampled on arrival)."""
VadKind = Literal["speech_start", "speech_long", "pause", "resume", "end"]
ReportKind = Literal["audible", "paused", "stopped", "done"]
Signal = Literal["words", "model", "audio", "fixed"]


@dataclass(frozen=True)
class MicBytes:
    """A microphone message as it came off the socket (app/core/wire.py's frame), decoded into a
    `MicFrame` on the session's turn-taking thread, not on the event loop."""

    data: bytes = field(repr=False)
    arrived: float
    """Server time the message arrived."""


@dataclass(frozen=True)
class MicFrame:
    """One microphone frame (no longer than app/web/transport.py takes), resampled to 16 kHz mono
    float32."""

    seq: int
    pcm: np.ndarray = field(repr=False)
    captured_ms: float
    """Browser time of the frame's last sample."""
    arrived: float
    """Server time the frame arrived."""


@dataclass(frozen=True)
class VadEvent:
    """What the endpointer concluded from the frames so far."""

    kind: VadKind
    """"speech_start" (enough speech to be a user talking), "speech_long" (another
    `barge_in_ms` of speech: the agent, if it speaks, checks the words so far), "pause" (a
    short silence: start the turn speculatively), "resume" (speech again after a pause: drop
    the speculation) or "end" (the silence is long enough: the turn is the user's answer,
    commit it)."""
    last_voiced_ms: float = 0.0
    """Browser time of the last voiced frame's end."""
    audio: np.ndarray | None = field(default=None, repr=False)
    """"pause" and "end": the utterance, 16 kHz mono, with a little audio before it."""
    speech_ms: float = 0.0
    """Voiced time of the utterance so far."""
    frame_ms: float = 0.0
    """Browser time of the frame that completed the evidence for this event."""


@dataclass(frozen=True)
class Transcript:
    turn_id: int
    text: str
    language: str
    asr_start: float
    asr_end: float
    score: float = 0.0
    """The decoder's mean log-probability per token: low for a guess at a hum or a cough."""
    last_word_s: tuple[float, float] | None = None
    """Where the transcript's last word lies in the audio (start, end, s), by Whisper's own
    alignment of its tokens to the audio (None: not aligned). A word Whisper added where
    the audio stops ("a table for it." for "a table for", the user pausing) gets no span."""
    close_p: float | None = None
    """Where Whisper ended the text with no closing mark (".", "?", "!"): the probability
    it gave one at the end, where it chose to stop instead. Low: the voice did not sound
    finished; high: it nearly closed the words (finished ones, or a half said with a short
    gap after it). None: it wrote one, or the probability was not read."""


@dataclass(frozen=True)
class EndOfTurn:
    """The end-of-turn decision on a speculative turn's transcript (app/stages/endofturn.py): how
    long the silence must last before the turn commits."""

    turn_id: int
    hold_ms: int
    """Silence after the last voiced frame before the turn commits (0: at once)."""
    signal: Signal
    """What decided: "words", "model", "audio"; "fixed": the fixed silence (detector off,
    or no signal could tell)."""
    detail: str
    """What it saw, for the page: the ending word, or a probability."""
    cost_ms: float
    """Time the decision took, after the transcript."""


@dataclass(frozen=True)
class ReplyDelta:
    """A piece of streamed reply text as it arrived from the model."""

    turn_id: int
    text: str
    t: float


@dataclass(frozen=True)
class ReplyPiece:
    """A speakable piece of the reply (a clause or a sentence), cut by the chunker."""

    turn_id: int
    index: int
    text: str
    t: float
    tokens: int
    """Reply tokens (stream deltas) received when the piece was complete."""


@dataclass(frozen=True)
class SpeechChunk:
    """Synthesised audio for one piece of the reply: mono int16 PCM."""

    turn_id: int
    index: int
    pcm: np.ndarray = field(repr=False)
    sample_rate: int
    text: str
    engine: str
    t: float


@dataclass(frozen=True)
class PlayerReport:
    """What the page's player did, in browser time."""

    kind: ReportKind
    """"audible" (a turn's first sample reached the speaker), "paused" (silent while the
    user's words are checked), "stopped" (barge-in: its audio dropped), "done" (the turn's
    audio has played out)."""
    turn_id: int
    t_ms: float
    received_ms: float | None = None
    """"audible": when the first audio message arrived in the page."""
    heard: tuple[float, ...] = ()
    """"stopped"/"done": the share of each piece (by index) that played."""
    cause_ms: float | None = None
    """"stopped": browser time of the microphone frame that decided the barge-in."""
    gap_ms: float | None = None
    """"stopped"/"done": silence inside the reply, summed (`TurnMetrics.reply_gap_ms`)."""
    gaps: int | None = None
    """"stopped"/"done": pieces that came after the one before had played out."""
