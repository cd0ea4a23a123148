"""The turn's bookkeeping: speculation, commit, barge-in cut, and its one metrics owner.

No stage runs here: these are about ordering (what the session shows and keeps when a
turn is committed, discarded or interrupted), so the stages' output is fed by hand.
"""

import numpy as np
import pytest

from app.clock import BrowserClock
from app.core.session import Session
from app.core.turn import Turn
from app.core.turnlog import heard_text
from app.messages import PlayerReport, SpeechChunk
from app.metrics import TurnMetrics, fill_timeline


def chunk(index: int, text: str) -> SpeechChunk:
    return SpeechChunk(1, index, np.ones(160, np.int16), 16000, text, "piper", 0.0)


def new_turn(session: Session) -> Turn:
    return Turn(session, TurnMetrics(1, "primary"), last_voiced_ms=1000.0)


def speaking_turn(session: Session, user: str, reply: str, pieces: list[str]) -> Turn:
    """A turn whose words are known and whose reply's pieces were synthesised."""
    turn = new_turn(session)
    turn.set_user_text(user)
    turn.add_reply(reply)
    for i, text in enumerate(pieces):
        turn.emit_audio(chunk(i, text))
    return turn


def test_speculation_shows_nothing_until_committed():
    s = Session("a")
    turn = speaking_turn(s, "What is the capital of France?", "The capital", ["The capital"])
    assert s.history == [] and s.chat == [] and s.metrics == []  # nothing seen or heard
    turn.commit()
    assert [h["content"] for h in s.history] == ["What is the capital of France?",
                                                   "The capital"]
    assert s.metrics == [turn.metrics] and "committed" in turn.stamps
    turn.add_reply(" is Paris.")
    assert s.history[1]["content"] == s.chat[1]["content"] == "The capital is Paris."


def test_the_page_gets_the_reply_text_with_its_voice_not_before():
    """A committed turn shows the user's words at once; its reply's text goes to the page
    with each piece of its voice, not at every token: each render is a round trip and a
    re-render of the chat, and a 2-core box's page shares the CPU with the model and TTS."""
    import asyncio

    from app.core.wire import Outbox

    loop = asyncio.new_event_loop()
    try:
        s = Session("t")
        s.outbox = Outbox(loop)
        turn = new_turn(s)
        turn.set_user_text("What is the capital of France?")
        turn.commit()
        shown = s.version
        assert s.chat[0]["content"] == "What is the capital of France?"  # at the commit
        turn.add_reply("The capital")
        turn.add_reply(" is")
        assert s.version == shown  # no re-render while the first audio is made
        turn.emit_audio(chunk(0, "The capital is"))
        assert s.version == shown + 1 and s.chat[1]["content"] == "The capital is"
        turn.add_reply(" Paris,")
        turn.add_reply(" in France.")
        assert s.version == shown + 1  # the model runs ahead of the voice: no re-render
        turn.emit_audio(chunk(1, "Paris, in France."))
        assert s.version == shown + 2
        assert s.chat[1]["content"] == "The capital is Paris, in France."
    finally:
        loop.close()


def test_commit_before_the_transcript_waits_for_it():
    s = Session("b")
    turn = new_turn(s)
    turn.commit()  # the silence was long enough before ASR finished
    assert s.history == [] and turn.committed
    turn.set_user_text("Hello")
    assert s.history[0]["content"] == "Hello"


def test_discarded_speculation_leaves_no_trace():
    s = Session("c")
    turn = speaking_turn(s, "Tell me", "Sure", ["Sure"])
    turn.discard()  # the user went on talking
    turn.commit()
    assert turn.cancel.is_set() and not turn.published
    assert s.history == [] and s.chat == [] and s.metrics == []
    assert not turn.wait_decided(0.05)


def test_barge_in_cuts_history_to_what_was_heard():
    s = Session("d")
    turn = speaking_turn(s, "Tell me about cats.",
                         "Cats are small. They purr when happy. They sleep a lot.",
                         ["Cats are small.", "They purr when happy.", "They sleep a lot."])
    turn.commit()
    turn.cancel.set()
    # the player stopped halfway through the second piece
    turn.on_player(PlayerReport("stopped", 1, t_ms=2100.0, heard=(1.0, 0.5, 0.0),
                                cause_ms=2000.0))
    turn.finish()
    assert s.history[1]["content"] == "Cats are small. They purr"
    assert s.history[1]["interrupted"] is True
    assert s.chat[1]["content"].endswith("[interrupted]")
    assert turn.metrics.cancelled and turn.metrics.interrupt_ms == 100.0
    assert turn.metrics.heard_chars == len("Cats are small. They purr")


def test_heard_text_by_share_of_each_piece():
    pieces = {0: "Hello there.", 1: "How are you today?", 2: "Fine."}
    assert heard_text(pieces, (1.0, 1.0, 1.0)) == "Hello there. How are you today? Fine."
    assert heard_text(pieces, (1.0, 0.0, 0.0)) == "Hello there."
    assert heard_text(pieces, (0.3, 0.0)) == ""
    assert heard_text({0: "你好，我是小安。"}, (0.5,)) == "你好，我"


def test_an_empty_reply_leaves_no_dangling_question():
    s = Session("e")
    turn = new_turn(s)
    turn.set_user_text("Hello?")
    turn.commit()
    turn.finish(error="the model stream broke")
    assert s.history == [] and [c["role"] for c in s.chat] == ["user"]


def test_one_owner_fills_every_stage_figure():
    clock = BrowserClock()
    clock.observe(captured_ms=1000.0, arrived=50.002)  # browser 1000 ms = server 50.002 s
    clock.observe(captured_ms=1020.0, arrived=50.030)  # a slower frame does not move it
    m = TurnMetrics(1, "primary")
    t0 = clock.to_server(900.0)  # the last voiced frame, 100 ms before that
    stamps = {"start": t0 + 0.13, "asr_start": t0 + 0.15, "asr_decode": t0 + 0.152,
              "asr_end": t0 + 0.45, "asr_handed": t0 + 0.451, "committed": t0 + 0.42,
              "llm_sent": t0 + 0.46, "first_token": t0 + 0.60, "first_piece": t0 + 0.80,
              "tts_start": t0 + 0.805, "first_audio": t0 + 0.90, "first_sent": t0 + 0.901,
              "received_ms": 900.0 + 903.0, "audible_ms": 900.0 + 950.0}
    fill_timeline(m, stamps, 900.0, clock)
    assert m.eot_wait_ms == 420.0 and m.asr_after_speech_ms == 450.0
    assert m.first_piece_ms == 200.0 and m.tts_first_audio_ms == 100.0
    assert m.transport_ms == pytest.approx(2.0, abs=0.2) and m.playback_ms == 47.0
    assert m.held_ms is None
    assert m.timeline["audible"] == pytest.approx(950.0, abs=0.2)
    assert list(m.timeline)[:8] == ["start", "asr_start", "asr_decode", "asr_end", "asr_handed",
                                    "committed", "llm_sent", "first_token"]
    # the hand-offs: 20 thread start + 2 ASR pick-up + 1 back + 9 request + 5 TTS pick-up
    assert m.handoff_ms == pytest.approx(37.0, abs=0.2)
    # a request held for the silence (`model_after_ms`): its wait is no hand-off
    fill_timeline(m, {**stamps, "model_go": t0 + 0.455}, 900.0, clock)
    assert m.timeline["model_go"] == pytest.approx(455.0, abs=0.2)
    assert m.handoff_ms == pytest.approx(33.0, abs=0.2)
    assert m.voice_wait_ms is None
    # the user's voice back after the commit held the first audio until it went: its own
    # figure, from the later of the audio ready and the voice back, to the audio sent
    held = {**stamps, "first_sent": t0 + 1.2, "received_ms": 900.0 + 1203.0}
    fill_timeline(m, {**held, "voice_back": t0 + 0.85}, 900.0, clock)
    assert m.voice_wait_ms == pytest.approx(300.0, abs=0.2)
    fill_timeline(m, {**held, "voice_back": t0 + 1.0}, 900.0, clock)
    assert m.voice_wait_ms == pytest.approx(200.0, abs=0.2)
    assert m.transport_ms == pytest.approx(3.0, abs=0.2)


def test_transport_is_known_when_the_page_answers_before_the_sender_runs_again():
    """On a busy machine the page's "audible" report (handled on the event loop's thread) can
    come back before the thread that sent the audio runs again: the send is stamped first."""
    import asyncio
    import time

    from app.core.wire import Outbox

    class AnsweringAtOnce(Outbox):
        def send_bytes(self, data: bytes, on_sent=None) -> None:
            super().send_bytes(data, on_sent)
            turn.on_player(PlayerReport("audible", 1, t_ms=1950.0, received_ms=1930.0))

    loop = asyncio.new_event_loop()
    try:
        s = Session("t")
        s.outbox = AnsweringAtOnce(loop)
        s.clock.observe(captured_ms=1000.0, arrived=time.perf_counter())
        turn = speaking_turn(s, "Hello", "Hi there", ["Hi there"])
        turn.commit()  # the held piece goes out: the report comes back inside the send
        assert turn.metrics.transport_ms is not None
        assert turn.metrics.v2v_ms == 950.0
    finally:
        loop.close()


def test_a_withdrawn_turn_leaves_history_chat_and_window_consistent():
    session = Session("w")
    for i in range(3):
        old = Turn(session, TurnMetrics(i + 1, "primary"))
        old.commit()
        old.set_user_text(f"question {i}")
        old.add_reply(f"answer {i}")
    session.history_start = 4  # the window starts at the last pair
    old.withdraw(9)
    assert [m["content"] for m in session.history] == ["question 0", "answer 0",
                                                       "question 1", "answer 1"]
    # the window began at the withdrawn pair: the continuation's pair takes its place there
    assert session.history_start == 4 and len(session.chat) == 4
    assert old.metrics.continued_in == 9 and not old.owns(session.history[-2])
    old.finish()  # its stages ending late put nothing back
    assert len(session.history) == 4 and len(session.chat) == 4


def test_a_held_model_request_goes_at_the_commit_or_is_given_up():
    turn = Turn(Session("s"), TurnMetrics(1, "primary"), last_voiced_ms=1000.0)
    assert turn.wait_model_go(timeout_s=0.01)  # not held: at once
    turn.model_go.clear()  # held for a longer silence (app/core/conversation.py)
    assert not turn.wait_model_go(timeout_s=0.05)  # nothing released it nor dropped it
    turn.commit("words: no open ending")  # a verdict before the silence: it goes now
    assert turn.wait_model_go(timeout_s=0.01) and "model_go" in turn.stamps
    turn.cancel.set()
    assert not turn.wait_model_go(timeout_s=0.01)
