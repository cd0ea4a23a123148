"""The turn's chain with scripted stages (the LLM and TTS Protocols; the real ones are in
tests/test_pipeline.py): what reaches the history, the speaker and the records, and that
only the Turn (app/core/turn.py) and the figures' own functions (app/metrics.py) write a record.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from app.config import AppConfig
from app.core.conversation import Conversation
from app.core.pipeline import Agent
from app.core.session import Session
from app.core.wire import Outbox
from app.messages import PlayerReport, ReplyDelta
from app.metrics import TurnMetrics
from app.stages.llm import Endpoint, LlmConfig, LlmError, StreamStats

REPLY = ["小安：", "The capital", " of France", " is Paris.", " It lies", " on the Seine."]
CLOSED = "http://127.0.0.1:9/v1"  # nothing listens: the servers' /metrics are not read


class ScriptedLlm:
    """Streams its script as a server would, timing it into `stats`; `fail_after` deltas
    it raises LlmError (the server went away mid-stream)."""

    def __init__(self, script: list[str], fail_after: int | None = None,
                 delay_s: float = 0.0) -> None:
        self.script, self.fail_after, self.delay_s = script, fail_after, delay_s
        self.requests: list[tuple[str, list[dict]]] = []

    def stream(self, endpoint: Endpoint, messages: list[dict], cfg: LlmConfig, turn_id: int,
               stats: StreamStats, cancel: threading.Event | None = None
               ) -> Iterator[ReplyDelta]:
        self.requests.append((endpoint.name, messages))
        stats.sent = time.perf_counter()
        try:
            for i, text in enumerate(self.script):
                if i == self.fail_after:
                    raise LlmError("the model stream broke (scripted)")
                time.sleep(self.delay_s)
                now = time.perf_counter()
                stats.first = stats.first or now
                stats.last, stats.deltas = now, stats.deltas + 1
                yield ReplyDelta(turn_id, text, now)
                if cancel is not None and cancel.is_set():
                    return
            stats.completion_tokens, stats.prompt_tokens = len(self.script), 42
        finally:
            stats.closed = time.perf_counter()


class ScriptedTts:
    """Half a second of a tone per piece."""

    def __init__(self) -> None:
        self.spoken: list[str] = []
        self.languages: list[str] = []

    def setup(self) -> None:
        pass

    def synthesize(self, text: str, language: str) -> tuple[np.ndarray, int, str, str]:
        self.spoken.append(text)
        self.languages.append(language)
        t = np.arange(8000) / 16000
        return (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16), 16000, "scripted", ""


def agent(llm: ScriptedLlm, anchor: bool = False) -> Agent:
    cfg = AppConfig(primary=Endpoint("primary", CLOSED, "m"),
                    anchor=Endpoint("anchor", CLOSED, "a") if anchor else None)
    return Agent(cfg, tts=ScriptedTts(), llm=llm)  # type: ignore[arg-type]


def typed_turn(a: Agent, text: str) -> tuple[Session, TurnMetrics, list]:
    session = Session("s")
    turn = a.new_turn(session, "text")
    turn.collect = []
    turn.commit("typed")
    m = a.run_turn(turn, text=text)
    return session, m, turn.collect


TURN = {"app.core.turn", "app.core.audiogate", "app.core.turnlog"}
"""The Turn and its parts (its audio gate, its part of the conversation)."""


@pytest.fixture
def writers(monkeypatch):
    """The module of every statement that sets a field of any TurnMetrics."""
    seen: set[str] = set()
    original = TurnMetrics.__setattr__

    def recording(self, name: str, value: object) -> None:
        seen.add(sys._getframe(1).f_globals["__name__"])
        original(self, name, value)

    monkeypatch.setattr(TurnMetrics, "__setattr__", recording)
    return seen


def test_a_turn_reaches_history_speaker_and_records_through_the_turn_alone(writers):
    llm = ScriptedLlm(REPLY)
    a = agent(llm, anchor=True)
    session, m, chunks = typed_turn(a, "What is the capital of France?")
    reply = "".join(REPLY)
    assert session.history == [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": reply}]
    # the tag is kept in the text and not spoken; the first piece is short
    assert a.tts.spoken[0] == "The capital of France is Paris." or \
        len(a.tts.spoken[0].split()) <= 4
    assert "小安" not in " ".join(a.tts.spoken)
    assert [c.index for c in chunks] == list(range(len(chunks))) and len(chunks) >= 2
    assert m.reply_tokens == len(REPLY) and m.ttft_ms is not None and m.tts_engine == "scripted"
    assert m.first_piece_tokens is not None and m.eot_signal == "typed"
    # the A/B: the same messages to the anchor after the primary, recorded beside it
    assert [name for name, _ in llm.requests] == ["primary", "anchor"]
    assert llm.requests[0][1] == llm.requests[1][1]
    rows = {r.endpoint: r for r in session.metrics}
    assert rows["anchor"].order == "after-primary" and rows["anchor"].reply_tokens == len(REPLY)
    assert writers <= TURN | {"app.metrics"}, writers


def test_a_stream_that_breaks_keeps_what_was_said_and_names_the_stage(writers):
    a = agent(ScriptedLlm(REPLY, fail_after=4))
    session, m, _ = typed_turn(a, "What is the capital of France?")
    assert m.error_stage == "llm" and "scripted" in m.error
    assert session.history[1]["content"] == "".join(REPLY[:4])
    assert session.chat[1]["content"].endswith("[cut off]")
    assert session.chat[-1]["content"].startswith("⚠")
    assert writers <= TURN | {"app.metrics"}, writers


def test_stand_in_speech_reads_a_real_reply_in_the_models_timing():
    """`--tts-stand-in` (dry runs): each delta of the model's stream becomes the next word of
    a real reply, so the chunker cuts a short first piece of real words, as it would from a
    real model; the conversation and history keep what the model said."""
    from app.stages.replytext import stand_in_replies

    a = agent(ScriptedLlm(REPLY))
    a.cfg.tts.stand_in = True
    session, m, chunks = typed_turn(a, "What is the capital of France?")
    assert session.history[1]["content"] == "".join(REPLY)
    spoken = " ".join(a.tts.spoken)
    # five deltas after the persona tag: the first five words of one stand-in reply
    assert any(reply.split(" ")[:5] == spoken.split(" ") for reply in stand_in_replies()), spoken
    assert len(a.tts.spoken[0].split(" ")) <= 3  # the first piece is short, as a real one
    assert len(a.tts.spoken) == len(chunks) >= 2
    assert m.first_piece_tokens is not None


def test_a_stand_in_reply_goes_on_with_the_next_when_the_model_says_more():
    from app.stages.replytext import StandIn, stand_in_replies

    s = StandIn(len(stand_in_replies()) - 1)
    n = len(stand_in_replies()[-1].split(" "))
    said = "".join(s.push("x") for _ in range(n + 2)).split()
    assert said[:n] == stand_in_replies()[-1].split(" ")
    assert said[n:] == stand_in_replies()[0].split(" ")[:2]
    assert s.push("") == ""  # a delta with no text (a skipped tag) says nothing


def test_a_mandarin_stand_in_reads_a_token_of_a_mandarin_reply_per_delta():
    """`--tts-stand-in` with `--language zh`: each delta of the model's stream becomes the
    next token of a Mandarin reply, read without the spaces that part the tokens in the
    file, so the chunker cuts a Mandarin first piece at its clause and the Mandarin voice
    reads it; the history keeps what the model said."""
    from app.stages.replytext import StandIn, stand_in_replies

    replies = stand_in_replies("zh")
    assert len(replies) >= 8 and all(r.endswith("。") for r in replies)
    s = StandIn(0, "zh")
    said = "".join(s.push("x") for _ in range(len(replies[0].split(" "))))
    assert said == replies[0].replace(" ", "") and not any(c.isascii() for c in said)
    assert s.push("x") == replies[1].split(" ")[0]  # then the next reply, as in English

    script = ["小安：", *[f" w{i}" for i in range(8)]]  # 8 tokens, as the GPU runs cap it
    a = agent(ScriptedLlm(script))
    a.cfg.tts.stand_in, a.cfg.language = True, "zh"  # the turn's language: Mandarin
    session, m, chunks = typed_turn(a, "明天上海天气怎么样？")
    assert session.history[1]["content"] == "".join(script)
    spoken = "".join(a.tts.spoken)
    assert any(r.replace(" ", "").startswith(spoken) for r in replies), spoken
    assert a.tts.languages == ["zh"] * len(a.tts.spoken) and len(a.tts.spoken) >= 2
    assert a.tts.spoken[0].endswith("，")  # the first piece ends at a clause, as a real one


def test_a_cancelled_turn_stops_reading_the_stream():
    llm = ScriptedLlm(REPLY)
    a = agent(llm)
    session = Session("s")
    turn = a.new_turn(session, "text")
    turn.commit("typed")
    original = turn.on_delta

    def cancel_after_first(delta, sent):
        original(delta, sent)
        turn.cancel.set()

    turn.on_delta = cancel_after_first  # type: ignore[method-assign]
    m = a.run_turn(turn, text="Hello")
    assert turn.reply == REPLY[0] and m.cancelled


def until(condition, timeout_s: float = 5.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def anchors(llm: ScriptedLlm) -> int:
    return sum(name == "anchor" for name, _ in llm.requests)


def test_the_anchor_waits_until_the_reply_has_played():
    """Sequential A/B with a page: the anchor's request is sent only once the conversation
    is idle, so it never competes with what the user is about to hear or say."""
    llm = ScriptedLlm(REPLY)
    conversation = Conversation(agent(llm, anchor=True))
    session = Session("s")
    listener = conversation.open(session)
    turn = conversation.start_text(session, "What is the capital of France?")
    listener.put(PlayerReport("audible", turn.turn_id, 100.0))  # the reply starts playing
    turn.thread.join(5)
    time.sleep(0.5)  # several ticks of the turn-taking thread
    assert anchors(llm) == 0
    listener.put(PlayerReport("done", turn.turn_id, 2000.0, heard=(1.0,)))
    assert until(lambda: anchors(llm) == 1)
    assert until(lambda: any(r.endpoint == "anchor" and r.reply_tokens for r in
                             session.metrics))
    record = next(r for r in session.metrics if r.endpoint == "anchor")
    assert record.ran_after_ms >= 500 and record.retries == 0
    listener.close()


def anchor_cut_by_a_second_turn(final_field: str):
    """A conversation whose first turn's anchor request runs (idle), then a second turn
    that cuts it: (llm, finals as (endpoint, turn, record's `final_field`), session,
    listener, first, second)."""
    llm = ScriptedLlm(REPLY, delay_s=0.1)
    finals: list[tuple] = []
    conversation = Conversation(agent(llm, anchor=True),
                                on_final=lambda m: finals.append((m.endpoint, m.turn_id,
                                                                  getattr(m, final_field))))
    session = Session("s")
    listener = conversation.open(session)
    first = conversation.start_text(session, "What is the capital of France?")
    first.thread.join(5)
    assert until(lambda: anchors(llm) == 1)  # idle: the anchor runs
    second = conversation.start_text(session, "And of Spain?")  # the user comes first
    return llm, finals, session, listener, first, second


def test_a_new_turn_cancels_the_anchor_which_is_sent_again_when_idle():
    llm, finals, session, listener, first, second = anchor_cut_by_a_second_turn("retries")
    second.thread.join(5)
    assert until(lambda: anchors(llm) == 3, timeout_s=10)  # second's, then first's again
    asked = [m[-1]["content"] for name, m in llm.requests if name == "anchor"]
    assert asked == ["What is the capital of France?", "And of Spain?",
                     "What is the capital of France?"]
    rows = [r for r in session.metrics if r.endpoint == "anchor"]
    assert until(lambda: all(r.reply_tokens == len(REPLY) for r in rows), timeout_s=5)
    assert sorted((r.turn_id, r.retries) for r in rows) == [(first.turn_id, 1),
                                                           (second.turn_id, 0)]
    # each record is final once: the anchor's first try, cancelled and sent again, is not
    assert until(lambda: len(finals) == 4)
    assert sorted(finals) == [("anchor", first.turn_id, 1), ("anchor", second.turn_id, 0),
                              ("primary", first.turn_id, 0), ("primary", second.turn_id, 0)]
    listener.close()


def test_a_last_try_cut_by_the_users_turn_is_drawn_once_idle_again(monkeypatch):
    """Cut on its last try by the user's next turn, the anchor's record is over, but it is
    made final (the page draws it) only after that turn: drawn at the cut, its figures took
    the page's and the server's time from the question being answered."""
    import app.core.anchor

    monkeypatch.setattr(app.core.anchor, "AB_TRIES", 1)  # the cut is its last try
    _, finals, _, listener, first, second = anchor_cut_by_a_second_turn("cancelled")
    time.sleep(0.3)  # the cut try's thread has ended; the second reply is under way
    assert second.thread.is_alive() and ("anchor", first.turn_id, True) not in finals
    second.thread.join(5)
    assert until(lambda: ("anchor", first.turn_id, True) in finals)
    assert finals.index(("primary", second.turn_id, False)) < \
        finals.index(("anchor", first.turn_id, True))
    assert until(lambda: ("anchor", second.turn_id, False) in finals)
    listener.close()


def page_session(loop: asyncio.AbstractEventLoop) -> Session:
    session = Session("page")
    session.outbox = Outbox(loop)  # what the app sends is queued on a loop nobody runs
    return session


def test_without_a_page_the_records_are_final_when_the_chain_is_over():
    finals: list[TurnMetrics] = []
    conversation = Conversation(agent(ScriptedLlm(REPLY), anchor=True), on_final=finals.append)
    session = Session("api")
    turn = conversation.start_text(session, "What is the capital of France?")
    turn.thread.join(5)
    assert [(m.endpoint, m.turn_id) for m in finals] == [("anchor", 1), ("primary", 1)]
    assert finals[1] is turn.metrics and finals[1].reply_tokens == len(REPLY)


def test_with_a_page_the_record_is_final_after_the_players_last_report():
    """The page's player reports when the reply became audible (voice-to-voice) and when
    it played out; only then is nothing left to write in the record."""
    finals: list[TurnMetrics] = []
    loop = asyncio.new_event_loop()
    conversation = Conversation(agent(ScriptedLlm(REPLY)), on_final=finals.append)
    session = page_session(loop)
    listener = conversation.open(session)
    turn = conversation.start_text(session, "What is the capital of France?")
    turn.thread.join(5)
    time.sleep(0.3)
    assert finals == []  # the reply is still playing in the page
    listener.put(PlayerReport("audible", turn.turn_id, 1000.0, received_ms=990.0))
    listener.put(PlayerReport("done", turn.turn_id, 3000.0, heard=(1.0, 1.0)))
    assert until(lambda: finals == [turn.metrics])
    assert finals[0].playback_ms == 10.0 and finals[0].v2v_ms is not None
    # a page closed with a reply in its player: the record is final without the report
    second = conversation.start_text(session, "And of Spain?")
    second.thread.join(5)
    time.sleep(0.3)
    assert len(finals) == 1
    listener.close()
    assert until(lambda: finals == [turn.metrics, second.metrics])
    loop.close()


def test_a_turn_that_failed_before_any_audio_is_final_when_its_chain_is_over():
    """Nothing of it reached the page, so no report will come: waiting would lose it."""
    finals: list[TurnMetrics] = []
    loop = asyncio.new_event_loop()
    conversation = Conversation(agent(ScriptedLlm(REPLY, fail_after=0)), on_final=finals.append)
    session = page_session(loop)
    listener = conversation.open(session)
    turn = conversation.start_text(session, "What is the capital of France?")
    turn.thread.join(5)
    assert finals == [turn.metrics] and finals[0].error_stage == "llm"
    listener.close()
    loop.close()
