"""The order of what happens when the user speaks over the agent (app/core/conversation.py):
which player commands go out, in which order, for each kind of speech. ASR is scripted here
(what it heard is the input of these tests); the player commands go through the real
Outbox; the browser scenarios with real ASR are tests/test_turn_taking.py."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace

import numpy as np
import pytest

from app.config import AppConfig
from app.core.anchor import AbJob
from app.core.conversation import Conversation
from app.core.floor_types import Played, Started, Utterance
from app.core.session import Session
from app.core.turn import Turn
from app.core.wire import Outbox
from app.messages import EndOfTurn, PlayerReport, Transcript, VadEvent
from app.metrics import TurnMetrics
from app.stages.endofturn import TurnConfig, TurnDetector
from app.stages.llm import Endpoint

REPLY = "The capital of France is Paris. It is a big city on the river Seine."


class ScriptedAsr:
    """Returns the next (text, score) of its script for each check."""

    def __init__(self, script: list[tuple[str, float]]) -> None:
        self.script = list(script)
        self.heard: list[int] = []

    def process(self, turn_id: int, audio: np.ndarray) -> Transcript:
        self.heard.append(len(audio))
        text, score = self.script.pop(0)
        return Transcript(turn_id, text, "en", 0.0, 0.0, score)


class ScriptedAgent:
    """The agent's side of a turn, recorded instead of run (no model, no TTS): which turns
    the conversation started, with what audio."""

    def __init__(self, asr: ScriptedAsr) -> None:
        self.asr = asr
        self.cfg = AppConfig(primary=Endpoint("primary", "http://127.0.0.1:9/v1", "m"))
        self.detector = TurnDetector(TurnConfig("off"), self.cfg.vad.silence_ms)
        self.ran: list[tuple[int, int]] = []
        self.measured: list[tuple[int, bool, bool]] = []
        self.ab = self  # the A/B's side too (`Rival.measure`)

    def new_turn(self, session: Session, source: str, last_voiced_ms=None) -> Turn:
        return Turn(session, TurnMetrics(session.new_turn_id(), "primary", source=source),
                    last_voiced_ms)

    def run_turn(self, turn: Turn, audio=None, text: str = "", heard=None,
                 later=None) -> None:
        self.ran.append((turn.turn_id, 0 if audio is None else len(audio)))

    def measure(self, turn: Turn, messages, order, cancel=None, m=None,
                retries: int = 0, last_try: bool = True, ran_after_ms=None,
                finish: bool = True):
        """The A/B anchor's request: recorded (turn, sent, last try), not sent."""
        self.measured.append((turn.turn_id, not cancel.is_set(), last_try))
        return m


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def talk(loop, script: list[tuple[str, float]]):
    """A session whose reply (turn 3) is playing, a conversation with the scripted ASR, and
    a function returning the player commands sent since it was last called."""
    agent = ScriptedAgent(ScriptedAsr(script))
    conversation = Conversation(agent)  # type: ignore[arg-type]
    session = Session("s")
    session.outbox = Outbox(loop)
    floor = conversation.floor(session)
    floor.turns[3] = Turn(session, TurnMetrics(3, "primary"), pieces={0: REPLY})
    playing(conversation, session, 3)

    def sent() -> list[str]:
        loop.run_until_complete(asyncio.sleep(0))  # the Outbox hands over on its loop
        out = []
        while not session.outbox.queue.empty():
            msg = json.loads(session.outbox.queue.get_nowait())
            if msg["type"] != "render":  # the page's refresh notice, not a player command
                out.append(msg["type"])
        return out

    return conversation, session, sent


def playing(conversation, session, turn_id: int, t_ms: float = 500.0) -> None:
    """The page reports turn `turn_id`'s reply audible."""
    conversation.on_report(session, PlayerReport("audible", turn_id, t_ms=t_ms))


def event(kind: str, speech_ms: float = 500, seconds: float = 0.6,
          frame_ms: float = 1000.0, last_voiced_ms: float = 1000.0) -> VadEvent:
    return VadEvent(kind, last_voiced_ms, np.zeros(int(16000 * seconds), np.float32),
                    speech_ms, frame_ms)


def test_a_command_stops_the_reply_at_the_first_check(loop):
    conversation, session, sent = talk(loop, [("Wait, stop.", -0.6)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_start"))
    assert sent() == []  # speech over the agent is not a turn (yet)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause", "stop"]  # silent first, then cut
    assert floor.utterance == "turn" and floor.paused_turn == 0


def test_a_hum_pauses_the_reply_then_lets_it_go_on(loop):
    """Read as words ("and may come."), a hum holds the reply until the utterance's end: its
    pause may be a gap between words."""
    conversation, session, sent = talk(loop, [("and may come.", -0.95)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause"] and floor.utterance == "pending"
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    conversation.on_vad(session, event("pause", frame_ms=1150.0))
    assert sent() == [] and floor.utterance == "pending"
    conversation.on_vad(session, event("end", frame_ms=1400.0))  # it was short
    assert sent() == ["resume"] and floor.utterance is None
    assert conversation.agent.asr.script == [] and conversation.agent.ran == []


def test_a_backchannel_lets_the_reply_go_on_at_its_pause(loop):
    conversation, session, sent = talk(loop, [("Yeah.", -0.3)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause"] and floor.utterance == "pending"
    conversation.on_vad(session, event("pause", frame_ms=1150.0))
    assert sent() == ["resume"] and floor.utterance == "resumed"


def test_a_question_said_over_the_reply_with_a_gap_between_its_words_stops_it(loop):
    """CI's case: "What is the | capital of France?" over a short reply, on a busy CPU. The
    gap after "What is the" is a pause (128 ms of silence): the reply stays paused. The
    check at the second speech_long came before the page reported the reply silent, so the
    rest of the question is checked at the utterance's pause: it stops the reply."""
    conversation, session, sent = talk(loop, [("Hello, friends.", -0.65),
                                              ("What is the weather in Spain?", -0.3)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long", frame_ms=1573.0, last_voiced_ms=1573.0))
    assert sent() == ["pause"] and floor.utterance == "pending"
    conversation.on_vad(session, event("pause", frame_ms=1730.0, last_voiced_ms=1600.0))
    assert sent() == [] and floor.utterance == "pending"  # a gap between words
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1930.0))
    conversation.on_vad(session, event("speech_long", speech_ms=1000, frame_ms=2099.0,
                                       last_voiced_ms=2099.0))
    assert sent() == [] and len(conversation.agent.asr.script) == 1  # not silent long yet
    conversation.on_vad(session, event("pause", speech_ms=1440, seconds=2.0,
                                       frame_ms=2756.0, last_voiced_ms=2606.0))
    assert sent() == ["stop"] and floor.utterance == "turn"
    assert conversation.agent.ran and conversation.agent.ran[-1][1] == 32000  # its turn


def test_a_guess_then_the_voice_going_on_is_checked_once(loop):
    """A first check that guessed (noise) and a voice that went on over the silent reply:
    checked again at the pause, not again at the end."""
    conversation, session, sent = talk(loop, [("Bullet friends", -2.03), ("Mm hmm", -1.5)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    assert sent() == ["pause"]
    conversation.on_vad(session, event("pause", frame_ms=1700.0, last_voiced_ms=1600.0))
    assert sent() == [] and conversation.agent.asr.script == []  # checked again: a guess
    conversation.on_vad(session, event("end", frame_ms=2000.0, last_voiced_ms=1600.0))
    assert sent() == ["resume"] and floor.utterance is None


def test_words_read_unsure_stop_the_reply_once_the_voice_went_on_over_its_silence(loop):
    """The rest of a sentence said on over the paused reply, read at a score a guess at a
    sound has ("Okay, that's good." at -1.38, a make test run): the user's words, since a
    hum, a cough or the echo stops with the reply. Read so before the voice went on
    barge_in_ms over the silence, it waits."""
    conversation, session, sent = talk(loop, [("And what is", -0.9),
                                              ("And what is the weather", -1.38),
                                              ("And what is the weather in Spain?", -1.38)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long", frame_ms=1000.0, last_voiced_ms=1000.0))
    assert sent() == ["pause"] and floor.utterance == "pending"
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    conversation.on_vad(session, event("speech_long", speech_ms=1000, frame_ms=1400.0,
                                       last_voiced_ms=1400.0))
    assert sent() == [] and floor.heard == "noise"  # 390 ms on: a cough may still end
    conversation.on_vad(session, event("pause", speech_ms=1400, seconds=2.0,
                                       frame_ms=1900.0, last_voiced_ms=1836.0))
    assert sent() == ["stop"] and floor.utterance == "turn"
    assert conversation.agent.asr.script == []


def test_at_its_end_voice_past_the_echo_tail_is_checked_again(loop):
    """The rest of a sentence said on over the reply, misread at its first check ("was moved
    to Friday" as "When the fry" at -1.85, make test) and going on 483 ms over the silence:
    under `barge_in_ms`, so its pause checks nothing, but at its end no more voice can come
    and voice beyond the echo's tail is read again, whole: words, the next turn. Ending
    within the echo's tail, it resumes the reply unread."""
    conversation, session, sent = talk(loop, [("When the fry", -1.85),
                                              ("was moved to Friday.", -0.5)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    assert sent() == ["pause"] and floor.heard == "noise"
    conversation.on_vad(session, event("pause", frame_ms=1557.0, last_voiced_ms=1493.0))
    assert sent() == [] and len(conversation.agent.asr.script) == 1  # 483 ms: not checked
    conversation.on_vad(session, event("end", frame_ms=1900.0, last_voiced_ms=1493.0,
                                       seconds=1.3))
    assert sent() == ["stop"] and conversation.agent.asr.script == []
    assert conversation.agent.ran == [(1, 20800)] and floor.utterance is None

    conversation, session, sent = talk(loop, [("When the fry", -1.85), ("unread", -0.5)])
    conversation.on_vad(session, event("speech_long"))
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    conversation.on_vad(session, event("end", frame_ms=1500.0, last_voiced_ms=1180.0))
    assert sent() == ["pause", "resume"] and conversation.agent.asr.script == [("unread", -0.5)]


def test_without_speculation_the_end_decides_the_words_said_over_the_reply(loop):
    """No pause event (eager_ms 0): the end checks the voice that went on over the silent
    reply and makes it the next turn, committed."""
    conversation, session, sent = talk(loop, [("What about", -0.5),
                                              ("What about Spain?", -0.4)])
    conversation.on_vad(session, event("speech_long"))
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    assert sent() == ["pause"]
    conversation.on_vad(session, event("end", frame_ms=2000.0, last_voiced_ms=1600.0,
                                       seconds=1.5))
    assert sent() == ["stop"]
    assert conversation.agent.ran == [(1, 24000)]
    assert conversation.floor(session).utterance is None


def test_words_interrupt_only_if_the_user_goes_on(loop):
    conversation, session, sent = talk(loop, [("What about", -0.5),
                                              ("What about Spain, tell me", -0.4)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause"]
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1010.0))
    conversation.on_vad(session, event("speech_long", speech_ms=1000, seconds=1.2,
                                       frame_ms=1500.0))
    assert sent() == ["stop"]  # already silent: the stop cuts it
    assert floor.utterance == "turn"


def test_only_speech_after_the_reply_went_silent_goes_on(loop):
    """The frames of the check's own ASR time come in late, in one burst, and the reply's
    echo lasts until the page is silent: none of that is the user going on."""
    conversation, session, sent = talk(loop, [("the weather is", -0.5),
                                              ("What about Spain, tell me", -0.4)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause"] and floor.utterance == "pending"
    conversation.on_vad(session, event("speech_long", speech_ms=1000, frame_ms=1400.0))
    assert sent() == [] and floor.utterance == "pending"  # the page has not said "silent"
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=1300.0))
    conversation.on_vad(session, event("speech_long", speech_ms=1500, frame_ms=1450.0))
    assert sent() == [] and len(conversation.agent.asr.script) == 1  # the echo's tail
    conversation.on_vad(session, event("speech_long", speech_ms=2000, frame_ms=1900.0))
    assert sent() == ["stop"] and floor.utterance == "turn"


def test_the_agents_own_voice_resumes_and_later_checks_do_not_pause(loop):
    conversation, session, sent = talk(loop, [("the capital of France is", -0.3),
                                              ("a big city on the river", -0.4)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause", "resume"] and 3 in floor.echo_turns
    conversation.on_vad(session, event("speech_long", speech_ms=1000))
    assert sent() == []  # echo again, and this reply is known to echo: no pause
    conversation.on_vad(session, event("end"))
    assert floor.utterance is None


def test_the_check_reads_the_last_seconds_only(loop):
    conversation, session, sent = talk(loop, [("the capital of France is", -0.3)])
    conversation.on_vad(session, event("speech_long", speech_ms=9000, seconds=12.0))
    assert conversation.agent.asr.heard == [4 * 16000]


def test_the_microphone_stopping_never_leaves_the_reply_paused(loop):
    conversation, session, sent = talk(loop, [("hmm hmm", -0.8)])
    floor = conversation.floor(session)
    conversation.on_vad(session, event("speech_long"))
    assert sent() == ["pause"]
    conversation.on_mic_stop(session)
    assert sent() == ["resume"] and floor.utterance is None


def test_the_echo_of_a_replys_last_words_is_not_a_turn(loop):
    """The reply plays out while its echo is still coming in: the utterance ends, nothing
    was said after the last sample, so no turn (the agent answered its own echo before)."""
    conversation, session, sent = talk(loop, [])
    floor = conversation.floor(session)
    session.next_turn = 4
    conversation.on_vad(session, event("speech_start", frame_ms=1800.0))
    assert floor.utterance == "over"
    conversation.on_report(session, PlayerReport("done", 3, t_ms=2000.0, heard=(1.0,)))
    assert floor.speaking == 0 and floor.reply_ended_ms == 2000.0
    conversation.on_vad(session, event("pause", last_voiced_ms=2060.0))
    conversation.on_vad(session, event("end", last_voiced_ms=2060.0))
    assert conversation.agent.ran == [] and floor.utterance is None
    assert sent() == []


def speech_confirmed_after_done(loop, confirmed_ms: float):
    """The reply (turn 3) played out at 2,000 (the page's "done"), then a speech_start at
    `confirmed_ms`, 250 voiced ms in: (conversation, session, sent, floor)."""
    conversation, session, sent = talk(loop, [])
    session.next_turn = 4
    conversation.on_report(session, PlayerReport("done", 3, t_ms=2000.0, heard=(1.0,)))
    conversation.on_vad(session, event("speech_start", speech_ms=250,
                                       last_voiced_ms=confirmed_ms, frame_ms=confirmed_ms))
    return conversation, session, sent, conversation.floor(session)


def test_an_echo_confirmed_as_speech_after_the_reply_ended_is_not_a_turn(loop):
    """CI's echo run: the last word's echo began under the reply, but its speech_start (some
    voiced frames in) came after the page's "done". It made a turn of the echoed word
    ("Fire.") before: the agent answered its own voice."""
    conversation, session, sent, floor = speech_confirmed_after_done(loop, 2100.0)
    assert floor.utterance == "over" and floor.utterance_over == 3
    conversation.on_vad(session, event("pause", last_voiced_ms=2120.0))
    conversation.on_vad(session, event("end", last_voiced_ms=2120.0))
    assert conversation.agent.ran == [] and floor.current is None and sent() == []


def test_speech_begun_after_the_reply_ended_is_the_users_turn_as_before(loop):
    conversation, session, sent, floor = speech_confirmed_after_done(loop, 2300.0)
    assert floor.utterance is None
    conversation.on_vad(session, event("pause", seconds=1.0, last_voiced_ms=2900.0))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 16000)]


def test_the_user_going_on_after_the_reply_ended_gets_a_turn(loop):
    conversation, session, sent = talk(loop, [("and what about Spain", -0.4)])
    floor = conversation.floor(session)
    session.next_turn = 4
    conversation.on_vad(session, event("speech_start", frame_ms=1800.0))
    conversation.on_report(session, PlayerReport("done", 3, t_ms=2000.0, heard=(1.0,)))
    conversation.on_vad(session, event("end", seconds=1.5, last_voiced_ms=3100.0))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 24000)] and floor.turns[4].committed


def test_an_echo_going_on_after_the_reply_is_still_no_turn(loop):
    conversation, session, sent = talk(loop, [("a big city on the river Seine", -0.3)])
    session.next_turn = 4
    conversation.on_vad(session, event("speech_start", frame_ms=1800.0))
    conversation.on_report(session, PlayerReport("done", 3, t_ms=2000.0, heard=(1.0,)))
    conversation.on_vad(session, event("end", last_voiced_ms=2400.0))  # a long room echo
    assert conversation.agent.ran == [] and conversation.agent.asr.script == []


def answered(conversation, session, turn_id: int = 3, last_voiced_ms: float = 1000.0,
             playing: bool = True, audible_ms: float = 1800.0) -> Turn:
    """Turn `turn_id` as the user's last voice turn: committed on 1 s of audio whose last
    voiced frame was at `last_voiced_ms`, its reply playing since `audible_ms` (or not
    audible yet)."""
    floor = conversation.floor(session)
    turn = Turn(session, TurnMetrics(turn_id, "primary"), last_voiced_ms, pieces={0: REPLY},
                audio=np.ones(16000, np.float32))
    turn.set_user_text("I'd like to book a table for it.")
    turn.commit("words: no open ending")
    turn.add_reply(REPLY)
    floor.turns[turn_id] = turn
    if playing:
        globals()["playing"](conversation, session, turn_id, audible_ms)
    else:  # the reply `talk` plays is over; this one is not audible yet
        conversation.apply(session, Played(PlayerReport("stopped", floor.speaking, 0.0)))
        conversation.apply(session, Started(turn_id, committed=True, model_go=True))
    session.next_turn = turn_id + 1
    return turn




def test_words_right_after_the_users_turn_continue_it(loop):
    """The user paused mid-sentence, the words looked finished, the reply began; the user
    had gone on before it was audible (so it is no echo): the first check stops the reply,
    and the next turn carries both utterances' audio and withdraws the first on publishing."""
    conversation, session, sent = talk(loop, [("two people at seven", -0.4)])
    floor = conversation.floor(session)
    first = answered(conversation, session)
    # began at 1,700 (2,000 - 300 ms of speech): 700 ms after the last voiced frame
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    assert floor.continues is first and sent() == []
    conversation.on_vad(session, event("speech_long", last_voiced_ms=2200, frame_ms=2200))
    assert sent() == ["pause", "stop"] and floor.utterance == "turn"
    conversation.on_vad(session, event("pause", seconds=1.5, last_voiced_ms=3000))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 16000 + 24000)]
    second = floor.turns[4]
    assert second.continues is first
    second.set_user_text("I'd like to book a table for two people at seven.")
    second.commit("words: no open ending")
    assert first.metrics.continued_in == 4
    assert [m["content"] for m in session.history] == [
        "I'd like to book a table for two people at seven.", ""]
    assert [m["content"] for m in session.chat][0] == second.user_text
    assert second.metrics.eot_signal == "words: no open ending (continues turn 3)"


def test_a_turn_not_heard_yet_is_continued_too(loop):
    """The turn committed, its audio not audible yet, and the user goes on: it stops and the
    next turn carries both."""
    conversation, session, sent = talk(loop, [])
    floor = conversation.floor(session)
    first = answered(conversation, session, playing=False)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    assert sent() == ["stop"] and first.cancel.is_set() and floor.continues is first
    conversation.on_vad(session, event("pause", seconds=1.0, last_voiced_ms=2500))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 32000)] and floor.turns[4].continues is first


def test_a_stopped_replys_late_audio_does_not_make_the_going_on_speech_over_it(loop):
    """CI's stuck run: the user went on, the reply was told to stop, but a piece already on
    its way played for 40 ms ("audible", then "stopped"). The rest of the sentence, misheard
    as noise by a check over the reply, was dropped and nothing answered it. The stopped
    reply's late audio is not the agent speaking: the rest continues the turn."""
    conversation, session, sent = talk(loop, [("To be full.", -1.3)])
    floor = conversation.floor(session)
    first = answered(conversation, session, playing=False)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    assert sent() == ["stop"] and first.cancel.is_set() and floor.continues is first
    conversation.on_report(session, PlayerReport("audible", 3, t_ms=2050.0))
    conversation.on_vad(session, event("speech_long", last_voiced_ms=2200, frame_ms=2200))
    assert sent() == [] and floor.speaking == 0  # no pause, no check over a silent agent
    conversation.on_report(session, PlayerReport("stopped", 3, t_ms=2090.0))
    conversation.on_vad(session, event("pause", seconds=1.0, last_voiced_ms=2500))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 32000)] and floor.turns[4].continues is first


def over_the_audible_reply(loop, said: str):
    """The user's last turn (voiced until 1,000) answered audibly from 1,500; the user spoke
    again from 1,700, and at its first check (ASR: `said`) the reply paused, silent at
    2,250: (conversation, session, sent, floor)."""
    conversation, session, sent = talk(loop, [(said, -0.4)])
    answered(conversation, session, audible_ms=1500.0)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    conversation.on_vad(session, event("speech_long", last_voiced_ms=2200, frame_ms=2200))
    conversation.on_report(session, PlayerReport("paused", 3, t_ms=2250.0))
    return conversation, session, sent, conversation.floor(session)


def test_going_on_over_the_audible_reply_stops_it_once_the_voice_outlasts_it(loop):
    """Begun after the reply was audible, the words might be its echo: the reply pauses, and
    the utterance's pause stops it only if the voice went on after the reply fell silent."""
    conversation, session, sent, floor = over_the_audible_reply(loop, "two people at seven")
    assert sent() == ["pause"] and floor.utterance == "pending"
    conversation.on_vad(session, event("pause", seconds=0.8, last_voiced_ms=2800))
    assert sent() == ["stop"]
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 16000 + 12800)] and floor.turns[4].continues


def test_an_echo_stopping_with_the_paused_reply_is_no_going_on(loop):
    conversation, session, sent, floor = over_the_audible_reply(loop, "and then the other one")
    assert floor.utterance == "pending"  # words, not heard as the echo they are
    conversation.on_vad(session, event("pause", seconds=0.8, last_voiced_ms=2300))
    assert sent() == ["pause"]  # held: a pause may be a gap between words
    conversation.on_vad(session, event("end", seconds=0.8, last_voiced_ms=2300))
    assert sent() == ["resume"] and conversation.agent.ran == []


def test_an_unfinished_sentence_committed_at_the_cap_is_continued_after_it(loop):
    """"I was wondering if ..." held 2 s, committed at the cap: going on 2.8 s after the
    last word still continues it (the window counts from the silence the verdict asked
    for); 4 s after does not."""
    for began_after_ms, continued in ((2800, True), (4000, False)):
        conversation, session, sent = talk(loop, [])
        first = answered(conversation, session, playing=False)
        first.judged(EndOfTurn(3, 2000, "words", "ends with “if”", 0.0))
        last = 1000 + began_after_ms + 300
        conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=last))
        assert (conversation.floor(session).continues is first) is continued


def test_speech_long_after_the_users_turn_is_an_interruption_as_before(loop):
    conversation, session, sent = talk(loop, [("What about Spain", -0.4)])
    floor = conversation.floor(session)
    answered(conversation, session)
    # began at 3,700: 2,700 ms after the last voiced frame, past continue_ms (1,500)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=4000))
    assert floor.continues is None
    conversation.on_vad(session, event("speech_long", last_voiced_ms=4200))
    assert sent() == ["pause"] and floor.utterance == "pending"


def test_a_command_right_after_the_users_turn_is_no_continuation(loop):
    conversation, session, sent = talk(loop, [("Stop.", -0.4)])
    floor = conversation.floor(session)
    answered(conversation, session)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    conversation.on_vad(session, event("speech_long", last_voiced_ms=2200))
    assert sent() == ["pause", "stop"] and floor.continues is None
    conversation.on_vad(session, event("pause", seconds=0.5, last_voiced_ms=2300))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 8000)] and floor.turns[4].continues is None


def test_continuing_off_leaves_interruptions_as_they_were(loop):
    conversation, session, sent = talk(loop, [("two people at seven", -0.4)])
    conversation.agent.cfg.turn.continue_ms = 0
    floor = conversation.floor(session)
    answered(conversation, session)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    conversation.on_vad(session, event("speech_long", last_voiced_ms=2200))
    assert floor.continues is None and sent() == ["pause"] and floor.utterance == "pending"


def test_a_commit_by_verdict_ends_the_utterance_so_the_next_reply_is_checked(loop):
    """After an interruption the utterance was "turn"; its turn committed by the verdict
    (no "end" comes then): speech over the next reply must be checked, not cut it at once."""
    conversation, session, sent = talk(loop, [])
    floor = conversation.floor(session)
    answered(conversation, session, playing=False)
    spec = Turn(session, TurnMetrics(4, "primary"), 3000.0)
    floor.turns[4] = spec
    floor.state = replace(floor.state, utterance=Utterance.TURN, continues=3, current=4,
                          committed=False)
    conversation._endpointer(session)  # the session's (Silero) endpointer, silent
    conversation.on_verdict(session, EndOfTurn(4, 0, "words", "no open ending", 0.0))
    assert spec.committed and floor.utterance is None and floor.continues is None
    playing(conversation, session, 4)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=9000))
    assert sent() == [] and floor.utterance == "over"


def test_a_hum_right_after_the_users_turn_lets_the_reply_go_on(loop):
    conversation, session, sent, floor = over_the_audible_reply(loop, "Hmm.")
    assert floor.utterance == "pending"  # a hum waits, paused
    conversation.on_vad(session, event("pause", seconds=0.8, last_voiced_ms=2800))
    assert sent() == ["pause", "resume"] and conversation.agent.ran == []
    assert floor.continues is not None  # the utterance may still turn out to be words


def test_a_command_after_the_reply_played_out_is_its_own_turn(loop):
    conversation, session, sent = talk(loop, [("Stop.", -0.4)])
    floor = conversation.floor(session)
    answered(conversation, session, audible_ms=1100.0)
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    conversation.on_report(session, PlayerReport("done", 3, t_ms=1900.0, heard=(1.0,)))
    conversation.on_vad(session, event("end", seconds=0.5, last_voiced_ms=2300))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 8000)] and floor.turns[4].continues is None


def test_a_turn_committed_before_its_transcript_is_continued(loop):
    """The silence committed it while ASR still ran; the user goes on: its words are not
    lost, the next turn transcribes both."""
    conversation, session, sent = talk(loop, [])
    floor = conversation.floor(session)
    first = Turn(session, TurnMetrics(3, "primary"), 1000.0, audio=np.ones(16000, np.float32))
    first.commit("silence 400 ms")
    floor.turns[3], session.next_turn = first, 4
    conversation.apply(session, Played(PlayerReport("stopped", 3, 0.0)))  # `talk`'s reply
    conversation.apply(session, Started(3, committed=True, model_go=True))
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    assert floor.continues is first and first.cancel.is_set()
    conversation.on_vad(session, event("pause", seconds=1.0, last_voiced_ms=2500))
    floor.turns[4].thread.join(5)
    assert conversation.agent.ran == [(4, 32000)]


def test_a_failed_turn_is_not_continued(loop):
    conversation, session, sent = talk(loop, [])
    floor = conversation.floor(session)
    first = answered(conversation, session, playing=False)
    first.metrics.error_stage = "llm"
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    assert floor.continues is None


def test_the_continued_turns_anchor_request_is_given_up(loop):
    """Its question is answered again with the rest: the A/B anchor does not measure the
    fragment, waiting or arriving late, and its record is closed as cancelled."""
    conversation, session, sent = talk(loop, [])
    agent, floor = conversation.agent, conversation.floor(session)
    first = answered(conversation, session, playing=False)
    older = Turn(session, TurnMetrics(2, "primary"))
    floor.anchor.waiting = [AbJob(older, []), AbJob(first, [])]
    conversation.on_vad(session, event("speech_start", speech_ms=300, last_voiced_ms=2000))
    conversation.on_vad(session, event("pause", seconds=1.0, last_voiced_ms=2500))
    assert [j.turn for j in floor.anchor.waiting] == [older]
    assert agent.measured == [(3, False, True)]
    playing(conversation, session, 4)  # not idle: nothing is sent now
    conversation.handle(session, AbJob(first, []))  # its turn thread handed it over late
    assert [j.turn for j in floor.anchor.waiting] == [older] and len(agent.measured) == 2


def test_the_page_is_told_of_changes_at_most_five_times_a_second():
    """Session.touch from any thread -> one `render` notice per RENDER_EVERY_S at most, and
    none lost: a change after a notice gets a notice of its own."""
    from app.core.wire import RENDER_EVERY_S

    loop = asyncio.new_event_loop()
    session = Session("s")
    session.outbox = Outbox(loop)

    def notices(wait_s: float) -> int:
        loop.run_until_complete(asyncio.sleep(wait_s))
        n = 0
        while not session.outbox.queue.empty():
            n += json.loads(session.outbox.queue.get_nowait())["type"] == "render"
        return n

    threads = [threading.Thread(target=lambda: [session.touch() for _ in range(50)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert notices(0.05) == 1  # 200 changes from 4 threads: one notice at once
    session.touch("Thinking...")
    assert notices(0.0) == 0  # within RENDER_EVERY_S of the last: not yet
    assert notices(RENDER_EVERY_S + 0.05) == 1  # but it comes
    assert notices(RENDER_EVERY_S + 0.05) == 0  # nothing changed since: silence
    loop.close()


def test_a_committed_turn_holds_the_pages_renders_until_its_first_audio():
    """While a committed turn's first audio is on its way the page is not told to fetch
    (its fetch and re-render would take the cores the reply needs): the notice goes with
    the audio, or after `at_most_s` if none comes."""
    from app.core.wire import RENDER_EVERY_S
    from app.messages import SpeechChunk

    loop = asyncio.new_event_loop()
    session = Session("s")
    session.outbox = Outbox(loop)

    def sent(wait_s: float) -> list[str]:
        loop.run_until_complete(asyncio.sleep(wait_s))
        out = []
        while not session.outbox.queue.empty():
            item = session.outbox.queue.get_nowait()
            out.append(json.loads(item)["type"] if isinstance(item, str) else "audio")
        return out

    session.outbox.hold_renders(at_most_s=5.0)
    session.touch()
    assert sent(RENDER_EVERY_S + 0.1) == []  # held: no notice while the reply is on its way
    session.send_audio(SpeechChunk(1, 0, np.zeros(160, np.int16), 16000, "Hi.", "piper", 0.0))
    assert sent(0.05) == ["audio", "render"]  # the words show with the voice
    session.outbox.hold_renders(at_most_s=1.0)
    session.touch()
    assert sent(0.3) == []
    assert sent(1.0) == ["render"]  # no audio came: the hold ends by itself
    loop.close()


class HeldAgent(ScriptedAgent):
    """A scripted agent whose turns wait for the model request's release, as the real
    chain does (app/core/pipeline.py), and record what the wait returned."""

    def __init__(self, vad) -> None:
        super().__init__(ScriptedAsr([]))
        self.cfg.vad = vad
        self.waited: dict[int, bool] = {}

    def run_turn(self, turn: Turn, audio=None, text: str = "", heard=None,
                 later=None) -> None:
        self.waited[turn.turn_id] = turn.wait_model_go()
        turn.wait_decided(timeout_s=5)


def speak(conversation: Conversation, session: Session, audio: np.ndarray,
          watch=None) -> None:
    """Real audio into the session's endpointer (Silero), in the page's 20 ms frames;
    `watch()` after each frame."""
    from app.messages import MicFrame

    for i in range(0, len(audio) - 319, 320):
        t_ms = (i + 320) / 16.0
        conversation.on_frame(session, MicFrame(i // 320, audio[i:i + 320], t_ms, t_ms / 1e3))
        if watch is not None:
            watch()


def question(*gaps_ms: int) -> np.ndarray:
    """The recorded question with a silence of each of `gaps_ms` inside it, and 0.5 s of
    silence before it."""
    from tests.test_vad import clip, trim

    speech = trim(clip("en_capital.wav"))
    parts, cut = [np.zeros(8000, np.float32)], len(speech) // (len(gaps_ms) + 1)
    for k, gap in enumerate(gaps_ms):
        parts += [speech[k * cut:(k + 1) * cut], np.zeros(16 * gap, np.float32)]
    return np.concatenate([*parts, speech[len(gaps_ms) * cut:]])


@pytest.mark.integration
def test_a_speculative_turns_model_request_waits_for_the_longer_silence():
    """ASR starts at the first silent frame (`eager_ms`), the model request only once the
    silence is `model_after_ms` long; the request is released as that frame comes in."""
    from app.stages.vad import VadConfig

    agent = HeldAgent(VadConfig(eager_ms=32, model_after_ms=128, silence_ms=400))
    conversation, session = Conversation(agent), Session("s")  # type: ignore[arg-type]
    session.outbox = None
    seen: dict[int, float] = {}  # turn -> the silence when its request was released

    def watch() -> None:
        current = conversation.floor(session).current
        if current is not None and current.model_go.is_set():
            seen.setdefault(current.turn_id, conversation._endpointer(session).silence_ms)

    speak(conversation, session, np.concatenate([question(), np.zeros(9600, np.float32)]),
          watch)
    turns = list(conversation.floor(session).turns.values())
    for t in turns:
        t.thread.join(timeout=5)
    turn, turn_id = turns[-1], turns[-1].turn_id  # before it: the clip's own short gaps
    assert agent.waited[turn_id] is True and turn.committed
    assert all(t.cancel.is_set() and agent.waited[t.turn_id] is False for t in turns[:-1])
    # released at the first frame with 128 ms of silence: the endpointer counts 32 ms frames
    assert 128 <= seen[turn_id] < 128 + 32
    assert turn.stamps["model_go"] < turn.stamps["committed"]


@pytest.mark.integration
def test_a_gap_between_words_shorter_than_model_after_sends_no_request():
    """A gap that starts a speculative turn (ASR) but ends before `model_after_ms`: the
    turn is dropped and its model request never goes; the whole question is one turn."""
    from app.stages.vad import VadConfig

    agent = HeldAgent(VadConfig(eager_ms=32, model_after_ms=256, silence_ms=400))
    conversation, session = Conversation(agent), Session("s")  # type: ignore[arg-type]
    session.outbox = None
    speak(conversation, session, np.concatenate([question(100), np.zeros(9600, np.float32)]))
    floor = conversation.floor(session)
    turns = list(floor.turns.values())
    for t in turns:
        t.thread.join(timeout=5)
    dropped = [t for t in turns if t.cancel.is_set()]
    assert len(turns) >= 2 and len(dropped) == len(turns) - 1  # the gap started one
    assert all(agent.waited[t.turn_id] is False and "model_go" not in t.stamps
               for t in dropped)
    assert agent.waited[turns[-1].turn_id] is True and turns[-1].committed
