"""The turn-taking state machine's types (app/core/floor.py): the state `Floor`, the settings
`step` reads, the events it takes and the commands it gives. All frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from app.messages import EndOfTurn, PlayerReport, VadEvent

ECHO_TAIL_MS = 200
"""Speech captured this soon after the paused reply went silent may still be its echo: the
room's delay and reverberation, the browser's output buffer."""
VOICE_GONE_MS = 300
"""After a commit, a voice back for less than an utterance lets the held reply go once it
has been quiet this long (a click, a cough): longer than the gaps between a sentence's
words, or replies to half questions go out at such gaps and play over the rest."""
UNHEARD_START_MS = 128
"""Voice that starts an utterance after a commit while none of the reply has gone out: a
short word said on ("and") is the user going on, though barely an utterance long."""
REPORT_WAIT_MS = 1500
"""How long (in the microphone's time) a pending utterance that has ended waits for the
page's report that the paused reply fell silent, before the pause's own time stands in
for it: a busy page reports late, and a client without a player never does."""


class Utterance(StrEnum):
    """The user's utterance while the agent speaks."""

    OVER = "over"
    """Begun over the reply; undecided."""
    PENDING = "pending"
    """The reply is paused: the words interrupt if the user goes on."""
    RESUMED = "resumed"
    """Let go (the echo, a backchannel, a short sound): later speech is checked again."""
    TURN = "turn"
    """It interrupted: it becomes the next turn."""


@dataclass(frozen=True)
class Rules:
    """The settings `step` reads (from `AppConfig`)."""

    detector_on: bool = False
    """An end-of-turn detector decides commits (else the fixed silence does)."""
    cap_ms: float = 2000.0
    model_after_ms: float = 128.0
    barge_in_ms: float = 500.0
    continue_ms: float = 0.0
    min_speech_ms: float = 250.0


# --- events --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Joinable:
    """The newest turn, when the user's next words may continue it: committed, not
    cancelled nor failed, with its audio and not too long (the owner's facts)."""

    turn_id: int
    last_voiced_ms: float
    hold_ms: float


@dataclass(frozen=True)
class Voice:
    """An endpointer event, with the silence after its frame and the turn it may continue."""

    vad: VadEvent
    silence_ms: float = 0.0
    joinable: Joinable | None = None


@dataclass(frozen=True)
class Latest:
    """The newest voice turn, committed (the owner's facts): whether none of its reply has
    gone to the page yet."""

    turn_id: int
    unheard: bool


@dataclass(frozen=True)
class Silence:
    """A microphone frame was handled: the silence since the last voiced frame (`quiet_ms`:
    since any voice, even too short for an utterance; None: none since the last one), the
    frame's browser time, and the newest committed voice turn."""

    silence_ms: float
    now_ms: float
    quiet_ms: float | None = None
    latest: Latest | None = None


@dataclass(frozen=True)
class Heard:
    """A check's verdict on the words (app/stages/interruption.py `verdict`)."""

    check: Check
    said: str


@dataclass(frozen=True)
class Judged:
    """The end-of-turn verdict on a speculative turn's words."""

    verdict: EndOfTurn


@dataclass(frozen=True)
class Played:
    """The page's player report on a turn (`cancelled`: that turn was told to stop)."""

    report: PlayerReport
    cancelled: bool = False


@dataclass(frozen=True)
class Started:
    """The turn a `StartTurn` made has this id."""

    turn_id: int
    committed: bool
    model_go: bool


@dataclass(frozen=True)
class ChainOver:
    """A turn's chain (ASR, model, TTS) is over."""

    turn_id: int


@dataclass(frozen=True)
class Typed:
    """The user typed or uploaded a turn, or the page went away: the agent stops."""


@dataclass(frozen=True)
class MicStop:
    """The microphone stopped (`closed`: the page went away): no more speech will come."""

    closed: bool = False


@dataclass(frozen=True)
class Deadline:
    """A new utterance begins: an ended one still waiting for the page's report is decided
    first, on what is known."""


Event = (Voice | Silence | Heard | Judged | Played | Started | ChainOver | Typed | MicStop
         | Deadline)


# --- commands ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """Read the utterance's last words (ASR) against what reply `turn_id` said; the owner
    applies `Heard` with the verdict. `at`: what the answer decides ("long": another
    `barge_in_ms` of speech, "pause", "end": a pending utterance's pause or end, "after":
    speech that went on after the reply ended)."""

    turn_id: int
    vad: VadEvent = field(compare=False)
    at: str
    went_on: bool = False
    pending: bool = False


@dataclass(frozen=True)
class PausePlayer:
    turn_id: int
    cause_ms: float


@dataclass(frozen=True)
class ResumePlayer:
    turn_id: int


@dataclass(frozen=True)
class Interrupt:
    """Stop what plays (`playing`, or `current` if its reply went out) and cancel `current`;
    a committed reply held for the user's voice is dropped unheard."""

    current: int
    playing: int
    cause_ms: float | None


@dataclass(frozen=True)
class StartTurn:
    """Start a voice turn on the utterance (`commit`: committed at once, with the reason)."""

    audio: np.ndarray | None = field(repr=False, compare=False)
    last_voiced_ms: float | None
    commit: str | None = None
    continues: int = 0
    model_go: bool = True


@dataclass(frozen=True)
class Commit:
    turn_id: int
    reason: str


@dataclass(frozen=True)
class Drop:
    """The user went on: the speculative turn is discarded unseen."""

    turn_id: int


@dataclass(frozen=True)
class ReleaseModel:
    turn_id: int


@dataclass(frozen=True)
class AcceptVerdict:
    verdict: EndOfTurn


@dataclass(frozen=True)
class HoldForVoice:
    """The committed turn's reply waits while the user's voice is back (`back`), and goes
    when it is gone; once some of it went to the page this changes nothing."""

    turn_id: int
    back: bool


@dataclass(frozen=True)
class StartAfter:
    """The endpointer starts an utterance after this much voice."""

    ms: float


@dataclass(frozen=True)
class EndAfter:
    """The endpointer ends the utterance after this much silence."""

    ms: float


@dataclass(frozen=True)
class CloseUtterance:
    """Speech from here on is a new utterance (the endpointer forgets this one)."""


@dataclass(frozen=True)
class Status:
    text: str


@dataclass(frozen=True)
class Let:
    """The utterance is over and makes no turn: why (the reply's echo, a backchannel, a
    short sound under the reply, the microphone stopped)."""

    reason: str


@dataclass(frozen=True)
class Note:
    """A line for the log: why something was decided."""

    text: str


Command = (Check | PausePlayer | ResumePlayer | Interrupt | StartTurn | Commit | Drop
           | ReleaseModel | AcceptVerdict | HoldForVoice | StartAfter | EndAfter
           | CloseUtterance | Status | Let | Note)


# --- the state -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Floor:
    """Who has the floor in one session."""

    current: int = 0
    """The turn being prepared or spoken (0: none)."""
    committed: bool = False
    """`current` is committed."""
    hold_ms: float | None = None
    """`current`'s verdict: the silence before it commits (None: no verdict yet)."""
    reason: str = ""
    """What decided that verdict."""
    model_go: bool = True
    """`current` may send its model request."""
    silence_ms: float = 0.0
    """The silence since the user's last voiced frame, at the newest frame."""
    speaking: int = 0
    """Turn whose audio the page is playing (its "audible" report; 0: silent)."""
    audible_ms: float | None = None
    """Browser time at which that reply became audible."""
    reply_ended_ms: float | None = None
    """Browser time at which the last reply played out (the page's "done")."""
    ended_turn: int = 0
    paused_turn: int = 0
    """Turn whose reply the page holds paused for the user's speech (0: none)."""
    paused_ms: float | None = None
    """Browser time of the frame that paused it."""
    paused_silent_ms: float | None = None
    """Browser time at which that pause went silent (the page's report)."""
    talking: bool = False
    """An utterance is open: from its start to its end (or its commit, or the microphone's
    stop)."""
    utterance: Utterance | None = None
    utterance_over: int = 0
    """The reply the current utterance began over."""
    began_ms: float = 0.0
    """Browser time at which the current utterance began (its first voiced frames)."""
    continues: int = 0
    """The committed voice turn the current utterance goes on from."""
    heard: str = ""
    """The last check's verdict on the current utterance over the agent."""
    rechecked_ms: float | None = None
    """The last voiced frame of the last pending utterance checked again at its pause."""
    echo_turns: frozenset[int] = frozenset()
    """Replies whose own voice came back as speech: later checks do not pause them."""
    undecided: VadEvent | None = field(default=None, repr=False)
    """A pending utterance's end, waiting for the page's report of the reply's silence."""

    @property
    def idle(self) -> bool:
        return self.current == 0 and self.speaking == 0
