"""Turn-taking as one state machine: `step(rules, floor, event) -> (floor, commands)`, pure.

`Floor` (floor_types.py) is all that decides whether the user's speech becomes a turn, when a
turn commits and whether the reply plays, pauses, resumes or stops. The owner
(conversation.py) applies the events one at a time, carries out the commands, and applies
the events those produce next. `TABLE` is checked against docs/ARCHITECTURE.md's.
"""

from __future__ import annotations

from dataclasses import replace

from app.core.floor_types import (
    ECHO_TAIL_MS,
    REPORT_WAIT_MS,
    UNHEARD_START_MS,
    VOICE_GONE_MS,
    AcceptVerdict,
    ChainOver,
    Check,
    CloseUtterance,
    Command,
    Commit,
    Deadline,
    Drop,
    EndAfter,
    Event,
    Floor,
    Heard,
    HoldForVoice,
    Interrupt,
    Judged,
    Let,
    MicStop,
    PausePlayer,
    Played,
    ReleaseModel,
    ResumePlayer,
    Rules,
    Silence,
    StartAfter,
    Started,
    StartTurn,
    Status,
    Typed,
    Utterance,
    Voice,
)
from app.messages import VadEvent

Out = tuple[Floor, list[Command]]


def step(rules: Rules, f: Floor, event: Event) -> Out:
    """The next state and the commands for one event."""
    if isinstance(event, Voice):
        return _voice(rules, replace(f, silence_ms=event.silence_ms), event)
    if isinstance(event, Deadline):
        return _decide_end(rules, f, estimate=True) if f.undecided is not None else (f, [])
    if isinstance(event, Silence):
        return _silence(rules, replace(f, silence_ms=event.silence_ms), event)
    if isinstance(event, Heard):
        return _heard(rules, f, event.check, event.said)
    if isinstance(event, Judged):
        if f.current != (v := event.verdict).turn_id or f.committed:
            return f, []  # the user went on (or it committed at the cap) before it came
        f = replace(f, hold_ms=float(v.hold_ms), reason=f"{v.signal}: {v.detail}")
        g, cmds = _commit_if_decided(f)
        return g, [AcceptVerdict(v), *cmds]
    if isinstance(event, Played):
        return _played(rules, f, event)
    if isinstance(event, Started):  # the turn a StartTurn made
        return replace(f, current=event.turn_id, committed=event.committed, hold_ms=None,
                       reason="", model_go=event.model_go), []
    if isinstance(event, ChainOver):
        return (replace(f, current=0, committed=False, hold_ms=None)
                if f.current == event.turn_id else f), []
    if isinstance(event, Typed):
        return _interrupt(f, None)
    if isinstance(event, MicStop):
        f, cmds = _mic_stop(f)
        return (replace(f, speaking=0) if event.closed else f), cmds  # no page plays
    raise TypeError(f"not an event: {event!r}")


# --- the microphone --------------------------------------------------------------------------
def _voice(r: Rules, f: Floor, ev: Voice) -> Out:
    e = ev.vad
    if e.kind == "end":
        f = replace(f, talking=False)
    over = f.speaking != 0 or _began_under_the_reply(f, e)
    if f.utterance in (Utterance.OVER, Utterance.PENDING, Utterance.RESUMED) \
            or (over and f.utterance is None):
        # speech over the agent: nothing but an interruption may come of it
        f, cmds = _over_agent(r, f, ev)
        if not (e.kind == "pause" and f.utterance is Utterance.TURN):
            return f, cmds
        g, more = _silent_agent(r, f, ev)  # it became the user's turn: its own pause
        return g, cmds + more
    return _silent_agent(r, f, ev)


def _silent_agent(r: Rules, f: Floor, ev: Voice) -> Out:
    e = ev.vad
    if e.kind == "speech_start":
        f = _began(r, f, ev)
        f, cmds = _interrupt(f, e.frame_ms)  # the user goes on: a turn being prepared stops
        return f, [*cmds, Status("Listening...")]
    if e.kind == "pause":
        cmds: list[Command] = [EndAfter(r.cap_ms)] if r.detector_on else []
        return f, [*cmds, _start(r, f, e)]
    if e.kind == "resume":
        if f.current and not f.committed:
            return replace(f, current=0, hold_ms=None), [Drop(f.current)]
        return f, []
    if e.kind == "end":
        f = replace(f, utterance=None)
        reason = f"silence {round(e.frame_ms - e.last_voiced_ms)} ms" + \
            (" (cap)" if r.detector_on else "")
        if f.current and not f.committed:
            return replace(f, committed=True, model_go=True), [Commit(f.current, reason)]
        return f, [_start(r, f, e, commit=reason)]
    return f, []  # speech_long with the agent silent: nothing to check


def _start(r: Rules, f: Floor, e: VadEvent, commit: str | None = None) -> StartTurn:
    return StartTurn(e.audio, e.last_voiced_ms, commit, f.continues,
                     model_go=commit is not None or f.silence_ms >= r.model_after_ms)


def _began(r: Rules, f: Floor, ev: Voice) -> Floor:
    """An utterance started: when, and the turn it goes on from: the newest committed voice
    turn, if this speech began at most `continue_ms` after the silence its verdict asked
    for, counted from its last voiced frame (the user's pause, whatever the agent did)."""
    began = ev.vad.last_voiced_ms - ev.vad.speech_ms
    j = ev.joinable
    continues = j.turn_id if r.continue_ms and j is not None \
        and began - j.last_voiced_ms <= j.hold_ms + r.continue_ms else 0
    return replace(f, began_ms=began, heard="", continues=continues, talking=True)


def _began_under_the_reply(f: Floor, e: VadEvent) -> bool:
    """Whether an utterance whose start is confirmed only now began while the last reply
    was still playing: the echo of its last words. Its `speech_start` needs some voiced
    frames, so it can come after the page's "done"."""
    ended = f.reply_ended_ms
    return e.kind == "speech_start" and f.utterance is None and ended is not None \
        and e.last_voiced_ms - e.speech_ms < ended


def _silence(r: Rules, f: Floor, ev: Silence) -> Out:
    now_ms, latest = ev.now_ms, ev.latest
    cmds: list[Command] = []
    if latest is not None:
        # a committed voice turn's reply waits while the user's voice is back and none of
        # it has gone out: the verdict may have taken a pause to think for the end, and the
        # utterance the voice becomes drops the reply unheard and joins its words; until
        # some of it went out, a short word makes that utterance
        back = ev.quiet_ms is not None and ev.quiet_ms < VOICE_GONE_MS
        cmds += [HoldForVoice(latest.turn_id, back),
                 StartAfter(UNHEARD_START_MS if latest.unheard else r.min_speech_ms)]
    if f.current and not f.model_go and f.silence_ms >= r.model_after_ms:
        # a short gap between words costs the shared model server nothing
        f, cmds = replace(f, model_go=True), [ReleaseModel(f.current)]
    if f.undecided is not None and now_ms >= f.undecided.frame_ms + REPORT_WAIT_MS:
        f, more = _decide_end(r, f, estimate=True)
        cmds += more
    f, more = _commit_if_decided(f)
    return f, cmds + more


def _commit_if_decided(f: Floor) -> Out:
    """Commit the speculative turn once the silence is as long as its verdict asks."""
    if not f.current or f.committed or f.hold_ms is None or f.silence_ms < f.hold_ms:
        return f, []
    # speech from here on is a new utterance (it interrupts); no "end" comes for this one
    return (replace(f, committed=True, model_go=True, utterance=None, continues=0,
                    talking=False),
            [Commit(f.current, f.reason), CloseUtterance()])


def _mic_stop(f: Floor) -> Out:
    cmds: list[Command] = []
    open_stretch = f.talking or f.undecided is not None
    if f.undecided is not None or f.utterance is Utterance.PENDING:
        f, cmds = _resume(replace(f, undecided=None))  # no more speech can decide it
    if f.current and not f.committed:
        cmds.append(Drop(f.current))
        f = replace(f, current=0, hold_ms=None)
    if open_stretch:
        cmds.append(Let("the microphone stopped"))
    return replace(f, utterance=None, continues=0, talking=False), cmds


# --- speech over the agent -------------------------------------------------------------------
def _over_agent(r: Rules, f: Floor, ev: Voice) -> Out:
    e = ev.vad
    if e.kind == "speech_start":
        if f.utterance is None:
            f = replace(f, utterance=Utterance.OVER, utterance_over=f.speaking or f.ended_turn)
            f = _began(r, f, ev)
        return f, []
    if e.kind == "end":
        if f.utterance is Utterance.PENDING:
            if f.heard in ("words", "noise") and f.paused_silent_ms is None:
                return replace(f, undecided=e), []  # wait for the page's report
            return _decide_end(r, replace(f, undecided=e), estimate=False)
        if f.utterance in (Utterance.OVER, Utterance.RESUMED) and not f.speaking:
            return _after_the_reply(replace(f, utterance=None), e)
        return replace(f, utterance=None), [Let(f"under the reply: {f.heard or 'short'}")]
    if e.kind == "pause" and f.utterance is Utterance.PENDING:
        if f.heard == "backchannel":  # "yeah": let go at once; more speech is checked afresh
            f, cmds = _resume(f)
            return replace(f, utterance=Utterance.RESUMED), cmds
        # words or a guess wait for the utterance's end (a pause may be a gap between
        # words), unless the voice went on over the silent reply: then the words decide now
        return _went_on(r, f, e, at="pause")
    if e.kind == "speech_long":
        if f.utterance is Utterance.PENDING and not _after_silence(f, e):
            return f, []  # the reply is not silent yet, or this is its echo's tail
        return _check(r, f, e, at="long")
    return f, []


def _decide_end(r: Rules, f: Floor, estimate: bool) -> Out:
    """A pending utterance has ended: it becomes the next turn if its voice went on over
    the silent reply and its words, checked again, are the user's, or if the reply had
    played out; else the reply resumes. `estimate`: no report of the silence came, the
    pause's own time stands in."""
    e, f = f.undecided, replace(f, undecided=None)
    assert e is not None
    if estimate and f.paused_silent_ms is None:
        f = replace(f, paused_silent_ms=f.paused_ms)
    f, cmds = _went_on(r, f, e, at="end")
    if any(isinstance(c, Check) for c in cmds):
        return f, cmds  # its answer decides (`_heard`)
    return _end_pending(f, e, cmds)


def _end_pending(f: Floor, e: VadEvent, cmds: list[Command]) -> Out:
    if f.utterance is Utterance.PENDING and f.heard == "words" and f.ended_turn \
            and f.ended_turn == f.paused_turn:  # it played out as it was paused: none to resume
        f = replace(f, utterance=Utterance.TURN, paused_turn=0)
    if f.utterance is Utterance.TURN:
        cmds = [*cmds, StartTurn(e.audio, e.last_voiced_ms, "speech over the paused reply",
                                 f.continues)]
    elif f.utterance is Utterance.PENDING:
        f, more = _resume(f)
        cmds = [*cmds, *more, Let(f"the reply resumed: {f.heard}, not said on")]
    else:  # the check found the reply's echo (it resumed)
        cmds = [*cmds, Let(f"under the reply: {f.heard}")]
    return replace(f, utterance=None), cmds


def _went_on(r: Rules, f: Floor, e: VadEvent, at: str) -> Out:
    """At the pause or end of a pending utterance: whether it becomes the next turn. It
    does if its voice went on for `barge_in_ms` over the paused, silent reply (at its end,
    beyond the echo's tail) and its words, checked again, are words or a command; the
    user going on from their last turn needs no second check."""
    after = ECHO_TAIL_MS if at == "end" else r.barge_in_ms
    if f.heard not in ("words", "noise") or not _voiced_after_silence(f, e, after) \
            or f.rechecked_ms == e.last_voiced_ms:  # its pause already checked it
        return f, []
    f = replace(f, rechecked_ms=e.last_voiced_ms)
    if f.continues and f.heard == "words":
        # the user went on from their last turn: this pause is the start of the rest of it
        f, cmds = _interrupt(replace(f, utterance=Utterance.TURN), e.frame_ms)
        return f, cmds
    return _check(r, f, e, at=at)


def _voiced_after_silence(f: Floor, e: VadEvent, after_ms: float) -> bool:
    """Whether the utterance's voice went on for `after_ms` after the paused reply fell
    silent: the user's, not the reply's echo."""
    silent = f.paused_silent_ms
    return silent is not None and e.last_voiced_ms >= silent + after_ms


def _after_silence(f: Floor, e: VadEvent) -> bool:
    """Whether this speech was captured after the paused reply went silent and its echo
    died away: only that is the user going on over the pause."""
    silent = f.paused_silent_ms
    return silent is not None and e.frame_ms >= silent + ECHO_TAIL_MS


def _after_the_reply(f: Floor, e: VadEvent) -> Out:
    """The reply ended while this utterance, begun over it, went on. It is the user's turn
    if they spoke after the reply's last sample (its echo gone) and the words are neither
    the reply's own nor no words at all."""
    ended = f.reply_ended_ms
    if ended is None or e.last_voiced_ms < ended + ECHO_TAIL_MS:
        # all of it under the reply: its echo, or a remark the reply covered
        return f, [Let(f"under the reply: {f.heard or 'short'}")]
    return f, [Check(f.utterance_over, e, "after")]


def _check(r: Rules, f: Floor, e: VadEvent, at: str) -> Out:
    """Another `barge_in_ms` of the user's speech over the agent: let the words decide.
    The reply is paused first (silent while its words are read), unless its own voice
    came back before."""
    playing = f.speaking
    if not playing:
        return f, []
    pending = f.utterance is Utterance.PENDING
    cmds: list[Command] = []
    if not pending and playing not in f.echo_turns:
        f, cmds = _pause(f, playing, e.frame_ms)
    went_on = pending and _voiced_after_silence(f, e, r.barge_in_ms)
    return f, [*cmds, Check(playing, e, at, went_on, pending)]


def _heard(r: Rules, f: Floor, c: Check, said: str) -> Out:
    if c.at == "after":
        if said != "words":
            f = replace(f, continues=0)  # an "okay" or a "stop" is not the question's rest
        if said in ("echo", "noise"):
            return f, [Let(f"after the reply: {said}")]
        return f, [StartTurn(c.vad.audio, c.vad.last_voiced_ms, "speech after the reply",
                             f.continues)]
    f = replace(f, heard=said)
    cmds: list[Command] = []
    if said in ("command", "echo"):
        f = replace(f, continues=0)  # about the reply, or the reply itself
    own = f.continues and f.audible_ms is not None and f.began_ms < f.audible_ms
    if said == "command" or (said == "words" and (c.pending or own)):
        f, cmds = _interrupt(replace(f, utterance=Utterance.TURN), c.vad.frame_ms)
    elif said == "echo":
        f, cmds = _resume(replace(f, utterance=Utterance.RESUMED,
                                  echo_turns=f.echo_turns | {c.turn_id}))
    else:  # words, a hum or a guess: interrupting only if the user goes on
        if not f.paused_turn:
            f, cmds = _pause(f, c.turn_id, c.vad.frame_ms)
        f = replace(f, utterance=Utterance.PENDING)
    if c.at == "end":
        return _end_pending(f, c.vad, cmds)
    if c.at == "pause" and f.utterance is Utterance.TURN:
        g, more = _silent_agent(r, f, Voice(c.vad, f.silence_ms))
        return g, cmds + more
    return f, cmds


def _pause(f: Floor, turn_id: int, cause_ms: float) -> Out:
    return (replace(f, paused_turn=turn_id, paused_ms=cause_ms, paused_silent_ms=None),
            [PausePlayer(turn_id, cause_ms)])


def _resume(f: Floor) -> Out:
    if not f.paused_turn:
        return f, []
    return replace(f, paused_turn=0), [ResumePlayer(f.paused_turn)]


def _interrupt(f: Floor, cause_ms: float | None) -> Out:
    """The user speaks over the agent: silence the player first, then cancel."""
    cmd = Interrupt(f.current, f.speaking, cause_ms)
    return replace(f, current=0, committed=False, hold_ms=None, paused_turn=0), [cmd]


# --- the page's player -----------------------------------------------------------------------
def _played(r: Rules, f: Floor, ev: Played) -> Out:
    p = ev.report
    cmds: list[Command] = []
    if p.kind == "audible" and not ev.cancelled:
        # a reply already told to stop whose audio was on its way is no agent speaking
        if f.talking and f.utterance is None and f.began_ms < p.t_ms:
            # the user had the floor before it was heard: their words go on to a turn,
            # the reply stops (it is not a reply to them)
            return f, [Interrupt(0, p.turn_id, p.t_ms)]
        f = replace(f, speaking=p.turn_id, audible_ms=p.t_ms)
        if f.talking and f.utterance is None:  # begun after it was heard: over the reply
            f = replace(f, utterance=Utterance.OVER, utterance_over=p.turn_id)
    if p.kind in ("done", "stopped") and f.speaking == p.turn_id:
        f = replace(f, speaking=0)
    if p.kind == "done":
        f = replace(f, reply_ended_ms=p.t_ms, ended_turn=p.turn_id)
    if p.kind == "paused" and p.turn_id == f.paused_turn:
        f = replace(f, paused_silent_ms=p.t_ms)
        if f.undecided is not None:
            return _decide_end(r, f, estimate=False)
    return f, cmds


# --- the table in docs/ARCHITECTURE.md --------------------------------------------------------
TABLE: dict[tuple[str, str], str] = {
    ("none", "speech_start"): "over (agent speaking) / a turn being prepared stops",
    ("none", "pause"): "a speculative turn starts",
    ("none", "resume"): "the speculative turn is dropped",
    ("none", "end"): "commit (or a committed turn starts)",
    ("none", "verdict"): "commit once the silence is as long as it asks",
    ("over", "speech_long"): "pause the reply, check the words",
    ("over", "end"): "after the reply ended: a turn if words went on past it",
    ("pending", "speech_long"): "check again once the reply is silent",
    ("pending", "pause"): "backchannel: resumed; went on: check again",
    ("pending", "end"): "went on past the silence: turn, else resume",
    ("pending", "paused report"): "decide an ended utterance that waited",
    ("resumed", "speech_long"): "check again",
    ("turn", "pause"): "a speculative turn starts (as with the agent silent)",
    ("turn", "end"): "commit",
}
"""(utterance, event) -> what happens."""
