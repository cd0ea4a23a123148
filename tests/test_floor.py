"""The turn-taking state machine (`app.core.floor.step`) driven by a simulated world: a user who
talks and pauses (an endpointer's events from their voice), a page that plays, pauses and
stops replies and reports late, ASR verdicts and end-of-turn verdicts drawn at random.
Hypothesis checks the invariants over random worlds; each invariant is shown to catch a
broken transition (`test_each_invariant_catches_a_broken_transition`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from app.core import eventlog
from app.core import floor as fl
from app.core.floor import step
from app.core.floor_types import (
    ChainOver,
    Check,
    CloseUtterance,
    Commit,
    Deadline,
    Drop,
    EndAfter,
    Floor,
    Heard,
    Interrupt,
    Joinable,
    Judged,
    Let,
    MicStop,
    PausePlayer,
    Played,
    ResumePlayer,
    Rules,
    Silence,
    Started,
    StartTurn,
    Typed,
    Utterance,
    Voice,
)
from app.messages import EndOfTurn, PlayerReport, VadEvent

STEP_MS = 20.0
SILENCE_MS = 400.0  # VadConfig's defaults
EAGER_MS = 64.0
MIN_SPEECH_MS = 250.0
SAID = ("command", "echo", "backchannel", "noise", "words")


@dataclass
class World:
    """The machine, and what it acts on, as the owner (`app/core/conversation.py`) would."""

    rules: Rules
    said: list[str]
    """What the checks hear, in order (then "words")."""
    f: Floor = field(default_factory=Floor)
    t: float = 0.0
    # the endpointer
    voiced_before: float = 0.0
    open: bool = False
    paused: bool = False
    voiced: float = 0.0
    next_long: float = 0.0
    last_voiced: float = 0.0
    began: float = 0.0
    end_after: float = SILENCE_MS
    # the page
    playing: int = 0
    page_paused: bool = False
    queued: list[int] = field(default_factory=list)
    reports: list[PlayerReport] = field(default_factory=list)
    # turns
    next_id: int = 1
    committed: dict[int, float] = field(default_factory=dict)
    cancelled: set[int] = field(default_factory=set)
    continuing: set[int] = field(default_factory=set)
    # what the invariants count
    stretches: int = 0
    outcomes: int = 0
    turns_made: int = 0
    violations: list[str] = field(default_factory=list)
    sequence: list[str] = field(default_factory=list)
    """Each outcome as it came: "turn" or "let: <reason>"."""
    lines: list[str] | None = None
    """The events applied, as `--record-events` writes them (when a list)."""

    # --- applying, as the owner does ----------------------------------------------------------
    def apply(self, event, follow: bool = False) -> None:
        if self.lines is not None:
            self.lines.append(eventlog.line(event, follow))
        self.f, cmds = step(self.rules, self.f, event)
        kinds = {type(c) for c in cmds}
        if ResumePlayer in kinds and kinds & {StartTurn, Commit, Interrupt}:
            self.violations.append(f"resumed and took the turn at once: {cmds}")
        if ResumePlayer in kinds and self.f.utterance not in (None, Utterance.RESUMED):
            self.violations.append(f"resumed while the utterance is {self.f.utterance}")
        for c in cmds:
            answer = self.do(c)
            if answer is not None:
                self.apply(answer, follow=True)

    def do(self, c):
        if isinstance(c, Check):
            return Heard(c, self.said.pop(0) if self.said else "words")
        if isinstance(c, StartTurn):
            turn_id, self.next_id = self.next_id, self.next_id + 1
            if c.continues:
                self.continuing.add(turn_id)
            if c.commit is not None:
                self.commit(turn_id)
            return Started(turn_id, c.commit is not None, c.model_go)
        if isinstance(c, Commit):
            self.commit(c.turn_id)
        elif isinstance(c, Let):
            self.outcomes += 1
            self.sequence.append(f"let: {c.reason}")
        elif isinstance(c, Drop):
            self.cancelled.add(c.turn_id)
        elif isinstance(c, Interrupt):
            if c.current:
                self.cancelled.add(c.current)
                if c.current in self.queued:
                    self.queued.remove(c.current)
            if c.playing and c.playing == self.playing:
                self.reports.append(PlayerReport("stopped", self.playing, self.t))
                self.playing, self.page_paused = 0, False
        elif isinstance(c, PausePlayer) and c.turn_id == self.playing:
            self.page_paused = True  # silent a little later; its report comes later still
            self.reports.append(PlayerReport("paused", c.turn_id, self.t + 40))
        elif isinstance(c, ResumePlayer) and c.turn_id == self.playing:
            self.page_paused = False
        elif isinstance(c, EndAfter):
            self.end_after = c.ms
        elif isinstance(c, CloseUtterance):
            self.close_utterance()
        return None

    def commit(self, turn_id: int) -> None:
        self.outcomes += 1
        self.sequence.append("continues" if turn_id in self.continuing else "turn")
        self.turns_made += 1
        if self.playing and not self.page_paused:
            self.violations.append(f"turn {turn_id} committed while {self.playing} plays")
        if self.playing and self.page_paused:
            self.violations.append(f"turn {turn_id} committed over paused {self.playing}")
        self.committed[turn_id] = self.last_voiced
        self.queued.append(turn_id)

    def close_utterance(self) -> None:
        self.open, self.paused, self.voiced_before = False, False, 0.0
        self.end_after = SILENCE_MS

    def vad(self, kind: str, audio_s: float = 0.5) -> None:
        if kind == "speech_start":
            if self.f.undecided is not None:
                self.apply(Deadline())
            if self.stretches and self.outcomes != 1:
                self.violations.append(f"a stretch ended in {self.outcomes} outcomes")
            self.stretches, self.outcomes = self.stretches + 1, 0
        joinable = None
        if kind == "speech_start" and self.committed:
            last = max(self.committed)
            if last not in self.cancelled:
                joinable = Joinable(last, self.committed[last], 0.0)
        e = VadEvent(kind, self.last_voiced, np.zeros(int(16000 * audio_s), np.float32),
                     self.voiced, self.t)
        self.apply(Voice(e, self.t - self.last_voiced if self.open else 0.0, joinable))

    # --- the world's actions ----------------------------------------------------------------
    def talk(self, ms: float) -> None:
        for _ in range(int(ms // STEP_MS)):
            self.t += STEP_MS
            self.last_voiced = self.t
            if not self.open:
                self.voiced_before += STEP_MS
                if self.voiced_before >= MIN_SPEECH_MS:
                    self.open, self.voiced = True, self.voiced_before
                    self.began, self.next_long = self.t - self.voiced, self.rules.barge_in_ms
                    self.vad("speech_start")
            else:
                if self.paused:
                    self.paused = False
                    self.vad("resume")
                self.voiced += STEP_MS
                if self.voiced >= self.next_long:
                    self.next_long += self.rules.barge_in_ms
                    self.vad("speech_long")
            self.apply(Silence(0.0, self.t))
            self.check_talking()

    def gap(self, ms: float) -> None:
        for _ in range(int(ms // STEP_MS)):
            self.t += STEP_MS
            self.voiced_before = 0.0
            silence = self.t - self.last_voiced
            if self.open and silence >= EAGER_MS and not self.paused:
                self.paused = True
                self.vad("pause", self.voiced / 1000)
            if self.open and silence >= self.end_after:
                self.vad("end", self.voiced / 1000)
                self.close_utterance()
            self.apply(Silence(silence, self.t))

    def check_talking(self) -> None:
        """No reply plays over the user's words once they were read as the user's."""
        if self.open and self.f.utterance in (Utterance.PENDING, Utterance.TURN) \
                and self.playing and not self.page_paused:
            self.violations.append(f"reply {self.playing} plays over {self.f.utterance} words")

    def audible(self) -> None:
        """The page starts the next reply that is due."""
        while self.queued and self.queued[0] in self.cancelled:
            self.queued.pop(0)
        if self.playing or not self.queued:
            return
        self.playing = self.queued.pop(0)
        self.page_paused = False
        began_before = self.open and self.began < self.t and self.f.utterance is None
        self.apply(Played(PlayerReport("audible", self.playing, self.t)))
        if began_before and self.playing and not self.page_paused:
            self.violations.append(f"reply {self.playing} heard over words begun before it")

    def done(self) -> None:
        if self.playing and not self.page_paused:
            self.reports.append(PlayerReport("done", self.playing, self.t))
            self.playing = 0

    def report(self) -> None:
        due, self.reports = self.reports, []
        for r in due:
            self.apply(Played(r))

    def verdict(self, hold_ms: float) -> None:
        if self.f.current and not self.f.committed:
            self.apply(Judged(EndOfTurn(self.f.current, int(hold_ms), "words", "", 0.0)))

    def chain_over(self) -> None:
        if self.f.current:
            self.apply(ChainOver(self.f.current))

    def finish(self) -> None:
        """Let everything settle: a long silence, the page's reports, another silence."""
        self.gap(self.rules.cap_ms + fl.REPORT_WAIT_MS + 200)
        self.report()
        self.gap(200)
        if self.stretches and self.outcomes != 1:
            self.violations.append(f"the last stretch ended in {self.outcomes} outcomes")
        if self.f.paused_turn or self.page_paused or self.f.undecided is not None:
            self.violations.append(f"reply {self.playing} left paused")


RULES = st.builds(Rules, detector_on=st.booleans(), cap_ms=st.just(2000.0),
                  model_after_ms=st.just(128.0), barge_in_ms=st.just(500.0),
                  continue_ms=st.sampled_from([0.0, 1500.0]))
ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("talk"), st.floats(100, 3000)),
    st.tuples(st.just("gap"), st.floats(20, 2500)),
    st.tuples(st.just("audible"), st.just(0.0)),
    st.tuples(st.just("done"), st.just(0.0)),
    st.tuples(st.just("report"), st.just(0.0)),
    st.tuples(st.just("verdict"), st.sampled_from([0.0, 400.0, 2000.0])),
    st.tuples(st.just("chain_over"), st.just(0.0)),
    st.tuples(st.just("typed"), st.just(0.0)),
    st.tuples(st.just("mic_stop"), st.just(0.0)),
), max_size=30)
WORLDS = st.tuples(RULES, st.sampled_from(["silent", "playing", "queued"]), ACTIONS,
                   st.lists(st.sampled_from(SAID), max_size=20))
"""(rules, the start: the agent silent, its reply playing or on its way, the world's actions,
what the checks hear)"""


def run(world_spec, lines: list[str] | None = None) -> list[str]:
    """Play one world; the invariants it broke (`lines`: its events written there)."""
    return play(world_spec, lines).violations


def play(world_spec, lines: list[str] | None = None) -> World:
    rules, start, actions, said = world_spec
    w = World(rules, list(said), lines=lines) if start == "silent" else \
        over_a_reply(rules, list(said), lines, audible=start == "playing")
    for action, x in actions:
        if action == "talk":
            w.talk(x)
        elif action == "gap":
            w.gap(x)
        elif action == "verdict":
            w.verdict(x)
        elif action == "typed":
            w.apply(Typed())
        elif action == "mic_stop":
            w.apply(MicStop())
            w.close_utterance()
        else:
            getattr(w, action)()
    w.finish()
    return w


PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(WORLDS)
def test_the_invariants_hold_in_random_worlds(spec):
    """Every voiced stretch ends in exactly one outcome (a committed turn, or a reason it
    made none); no reply plays over words read as the user's, nor over words begun before
    it; a commit never comes while a reply plays; a resumed reply is not resumed over a
    stretch that becomes a turn; no reply is left paused once all is said."""
    assert run(spec) == []


# --- each invariant, broken on purpose --------------------------------------------------------
def _no_stop(f, cause_ms):
    cmd = Interrupt(f.current, 0, cause_ms)  # forgets what plays
    return replace(f, current=0, committed=False, hold_ms=None, paused_turn=0), [cmd]


def _resume_then_stop(f, cause_ms):
    g, out = ORIGINAL["_interrupt"](f, cause_ms)
    return g, ([ResumePlayer(f.paused_turn)] if f.paused_turn else []) + out


def _silent_pause(f, turn_id, cause_ms):
    g, _ = ORIGINAL["_pause"](f, turn_id, cause_ms)
    return g, []  # the state says paused; the page is never told


def _never_resume(f, e, cmds):
    if f.utterance is Utterance.PENDING:
        return replace(f, utterance=None), [*cmds, Let("kept paused")]
    return ORIGINAL["_end_pending"](f, e, cmds)


def _commit_twice(r, f, ev):
    g, out = ORIGINAL["_silent_agent"](r, f, ev)
    if ev.vad.kind == "end" and any(isinstance(c, Commit) for c in out):
        out = [*out, fl._start(r, f, ev.vad, commit="again")]
    return g, out


def _played_no_floor(r, f, ev):
    p = ev.report
    if p.kind == "audible" and not ev.cancelled:
        return replace(f, speaking=p.turn_id, audible_ms=p.t_ms), []
    return ORIGINAL["_played"](r, f, ev)


ORIGINAL = {name: getattr(fl, name) for name in
            ("_interrupt", "_end_pending", "_silent_agent", "_played", "_pause")}
BROKEN = {
    "committed": ("_interrupt", _no_stop),
    "plays over": ("_pause", _silent_pause),
    "resumed and took the turn at once": ("_interrupt", _resume_then_stop),
    "left paused": ("_end_pending", _never_resume),
    "outcomes": ("_silent_agent", _commit_twice),
    "heard over words begun before it": ("_played", _played_no_floor),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_each_invariant_catches_a_broken_transition(broken, monkeypatch):
    name, bad = BROKEN[broken]
    monkeypatch.setattr(fl, name, bad)
    found = find(WORLDS, lambda spec: any(broken in v for v in run(spec)),
                 settings=settings(max_examples=3000, deadline=None, database=None,
                                   suppress_health_check=list(HealthCheck)))
    assert any(broken in v for v in run(found))


# --- the cases the field reports named --------------------------------------------------------
def over_a_reply(rules: Rules, said: list[str], lines: list[str] | None = None,
                 audible: bool = True) -> World:
    """A reply (turn 1) plays (or, `audible` off, is on its way); the user is silent."""
    w = World(rules, said, lines=lines)
    w.committed[1] = 0.0
    w.queued.append(1)
    w.next_id = 2
    w.gap(200)
    if audible:
        w.audible()
        w.gap(500)
    return w


@given(speech_ms=st.floats(1300, 3000), late_ms=st.floats(0, 1400))
@settings(max_examples=60, deadline=None)
def test_a_question_over_a_reply_is_a_turn_however_late_the_pause_is_reported(speech_ms,
                                                                            late_ms):
    """"Hi, can you hear me?" over a reply: read as words at its first check, the reply
    paused; the page's report that it fell silent comes late (a busy page), after the
    question is over. The question is a turn with its words and the reply stops: the
    report's time decides, not when it arrives."""
    w = over_a_reply(Rules(detector_on=False), ["words", "words", "words", "words"])
    w.talk(speech_ms)
    assert w.f.utterance in (Utterance.PENDING, Utterance.TURN) and w.page_paused \
        or w.f.utterance is Utterance.TURN
    w.gap(SILENCE_MS + 40)  # the question is over; no report yet
    w.gap(late_ms)
    w.report()
    w.gap(fl.REPORT_WAIT_MS)
    assert w.turns_made == 1 and w.playing == 0 and w.violations == []


def test_a_hum_over_a_reply_resumes_it_once_the_report_comes():
    """A hum read as words pauses the reply; short, it did not go on past the silence: the
    reply resumes when the page's (late) report shows that, with the reason recorded."""
    w = over_a_reply(Rules(detector_on=False), ["words"])
    w.talk(600)
    assert w.page_paused and w.f.utterance is Utterance.PENDING
    w.gap(SILENCE_MS + 40)
    assert w.page_paused and w.f.undecided is not None  # waits for the report
    w.report()
    assert not w.page_paused and w.turns_made == 0 and w.outcomes == 1


def test_words_over_a_reply_that_plays_out_as_it_is_paused_are_a_turn():
    """A short reply ends just as the words over it pause it ("What does the" ... the
    rest after a gap): nothing is left to resume, so the words are the user's turn, not
    let go as a remark the reply went on over."""
    w = over_a_reply(Rules(detector_on=False), ["words", "words"])
    w.talk(480)
    w.done()  # its last sample played before the pause came
    w.talk(120)  # speech_long: the words check pauses a reply that is over
    w.report()
    w.gap(SILENCE_MS + fl.REPORT_WAIT_MS + 100)
    assert w.turns_made == 1 and w.violations == [], w.sequence


def test_without_player_reports_the_pause_time_stands_in():
    """A client that sends no player reports (a Realtime client): the decision comes at
    the deadline, on the pause's own time."""
    w = over_a_reply(Rules(detector_on=False), ["words", "words", "words"])
    w.talk(2000)
    w.reports.clear()  # this client reports nothing
    w.gap(SILENCE_MS + fl.REPORT_WAIT_MS + 100)
    assert w.turns_made == 1 and w.violations == []


def test_a_reply_heard_over_a_question_begun_before_it_stops():
    """The user began speaking before the reply was audible: the reply stops, the question
    goes on to a turn by the same path as with the agent silent."""
    w = World(Rules(detector_on=True), [])
    w.committed[1] = 0.0
    w.queued.append(1)
    w.next_id = 2
    w.talk(400)
    w.audible()
    assert w.playing == 0 and w.violations == []
    w.talk(800)
    w.gap(300)
    assert w.f.current and not w.f.committed  # a speculative turn, as when silent
    w.verdict(0)
    assert w.turns_made == 1 and w.f.committed


def test_step_is_pure():
    """The same state and event give the same answer, and the state is not changed."""
    f = Floor(speaking=3, utterance=Utterance.OVER)
    e = Voice(VadEvent("speech_long", 900.0, np.zeros(8000, np.float32), 500.0, 900.0))
    before = replace(f)
    assert step(Rules(), f, e) == step(Rules(), f, e) and f == before


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=WORLDS)
def test_a_recorded_world_replays_to_the_same_outcomes(spec, tmp_path_factory):
    """`--record-events` writes what a replay needs: the inputs replayed through `step`,
    with the checks answered from the recording, give each stretch the same outcome."""
    lines: list[str] = []
    w = play(spec, lines)
    path = tmp_path_factory.mktemp("rec") / "world.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert eventlog.replay(eventlog.read(path), w.rules).outcomes == w.sequence
