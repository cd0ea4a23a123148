"""The end of a turn by what was said (app/stages/endofturn.py) and where it is applied
(app/core/conversation.py): a speculative turn commits once the silence is as long as the
verdict on its words asks, a pause in an unfinished sentence holds it, and the verdicts,
the microphone's frames and the player's reports are handled on one thread, in order.

Real Silero VAD on a committed recording; the agent's side is scripted (no model, no TTS).
The model's end-of-message probability on a real vLLM: tests/test_endofturn_model.py.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import soundfile as sf

from app.config import AppConfig
from app.core.conversation import MIC_STOP, Conversation
from app.core.floor import VOICE_GONE_MS
from app.core.session import Session
from app.core.turn import Turn
from app.core.wire import Outbox
from app.messages import EndOfTurn, MicFrame, PlayerReport, SpeechChunk, Transcript
from app.metrics import TurnMetrics
from app.stages.endofturn import TurnConfig, TurnDetector, heard_words, normalize, unfinished_ending
from app.stages.llm import Endpoint
from tests.conftest import ASSETS


@pytest.mark.parametrize("text, ending", [
    ("I'd like to book a table for.", "for"),
    ("I want to go to the beach and", "and"),
    ("What is the best way to?", "to"),
    ("I was wondering if...", "..."),
    ("So I think, um,", ","),
    ("My favourite colour is", "is"),
    ("我想订一张", "一张"),
    ("因为今天下雨，所以", "所以"),
    ("Can you tell me?", "tell me"),
    ("你能不能帮我。", "帮我"),
    ("What are you looking for?", None),
    ("Who did you go with?", None),
    ("Can you remind me about my appointment with?", "with"),
    ("Can you help me?", None),
    ("Can you tell me how far the station is?", None),
    ("My flight has been", "been"),
    ("What time is it?", None),
    ("Tell me a short joke about cats.", None),
    ("Thanks.", None),
    ("Hello, who are you?", None),
    ("Thank you", None),
    ("I think they", "they"),
    ("So I think", "i think"),
    ("We need", "we need"),
    ("Yeah, I guess.", None),
    ("今天天气怎么样？", None),
    ("附近,有没有?", "有没有"),
    ("好的。", None),  # a reply of its own, not "的" left open
    ("这首歌是谁唱的？", None),  # "是 ... 的"
    ("我最喜欢的是", "是"),
    ("", None),
])
def test_open_endings(text, ending):
    assert unfinished_ending(text) == ending


def test_the_model_reads_the_words_without_the_asrs_closing_punctuation():
    assert normalize("  I'd like  to book a table for. ") == "I'd like to book a table for"
    assert normalize("我想订一张。") == "我想订一张"


def test_words_hold_an_open_ending_up_to_the_cap_and_commit_the_rest_at_once():
    detector = TurnDetector(TurnConfig("words", cap_ms=1800), silence_ms=400)
    held = detector.judge(1, "I'd like to book a table for.")
    done = detector.judge(2, "I'd like to book a table for two people at eight tonight.")
    assert (held.hold_ms, held.signal, held.detail) == (1800, "words", "ends with “for”")
    assert (done.hold_ms, done.signal) == (0, "words")
    assert detector.judge(3, "").hold_ms == 400  # no words: the fixed silence


def test_a_last_word_whisper_aligned_to_no_voice_is_not_judged():
    """At a pause after "I'd like to book a table for" tiny.en wrote "... a table for it."
    and put "it" at 1.84-1.90 s (in the page): a word guessed where the voice stopped. The
    words heard end with "for": held to the cap. A last word with voice is judged as is."""
    detector = TurnDetector(TurnConfig("words", cap_ms=2000), silence_ms=400)
    held = detector.judge(1, "I'd like to work a table for it.", last_word_s=(1.84, 1.90))
    assert (held.hold_ms, held.detail) == (2000, "ends with “for” (“it”: no voice)")
    done = detector.judge(2, "Where are you from?", last_word_s=(1.3, 1.48))
    assert (done.hold_ms, done.detail) == (0, "no open ending")
    assert heard_words("Remind me to order it.", (1.7, 1.7)) == ("Remind me to order", "it")
    assert heard_words("我想订一张票。", (1.0, 1.01)) == ("我想订一张", "票")
    assert heard_words("It.", (0.5, 0.5)) == ("", "It")
    assert detector.judge(3, "It.", last_word_s=(0.5, 0.5)).detail == "no words"
    assert heard_words("for it.", None) == ("for it.", "")


def test_finished_looking_words_the_asr_closed_with_no_mark_are_held_a_little():
    """Live in the page tiny.en wrote "We can take that rain" for "We could take the train
    or" and "Remind me, Lord" for "Remind me to order" at a 700-833 ms pause: no open
    ending, but no closing mark either. They wait `unmarked_ms` of silence, past such a
    pause, and so does Mandarin Whisper left unclosed ("记得提醒我明天早上" before "把垃圾拿出去"
    in the Mandarin set); a closed sentence (quotes after the mark too) commits at once."""
    detector = TurnDetector(TurnConfig("words", cap_ms=2000, unmarked_ms=1000), silence_ms=400)
    for text in ("We can take that rain", "Remind me, Lord", "Please", "我们走吧",
                 "记得提醒我明天早上"):
        verdict = detector.judge(1, text)
        assert (verdict.hold_ms, verdict.signal, verdict.detail) == \
            (1000, "words", "no closing mark"), text
    for text in ("We could take the train or catch a taxi.", 'She said "yes."', "Really?!",
                 "我们走吧。", "今天会下雨吗？", "今天会下雨吗?"):
        assert detector.judge(2, text).hold_ms == 0, text
    # a word guessed where the voice stopped leaves the words heard unclosed: held a little
    guessed = detector.judge(3, "Remind me to order it.", last_word_s=(1.7, 1.72))
    assert (guessed.hold_ms, guessed.detail) == (1000, "no closing mark (“it”: no voice)")
    assert TurnDetector(TurnConfig("off"), 400).judge(4, "Please").hold_ms == 400


def test_a_mandarin_reading_of_a_word_or_two_is_held_a_little():
    """Whisper base reads the first word or two of a Mandarin sentence said before a pause
    as other words, closed ("保我。" for "帮我 ..."): too few to judge, they wait
    `unmarked_ms`; short replies and a word with its particle commit at once."""
    detector = TurnDetector(TurnConfig("words", cap_ms=2000, unmarked_ms=1000), silence_ms=400)
    for text in ("保我。", "模像", "不敬。"):
        verdict = detector.judge(1, text)
        assert (verdict.hold_ms, verdict.detail) == (1000, "a word or two"), text
    for text in ("好的。", "谢谢。", "走吧。", "对。", "你好。", "我昨天去了。"):
        assert detector.judge(2, text).hold_ms == 0, text


def test_unclosed_words_whisper_nearly_closed_wait_the_fixed_silence():
    """Where Whisper gave the closing mark it left out a high probability ("Tell me
    something about dolphins", finished; live it waited the whole `unmarked_ms`), the words
    cannot tell: the fixed silence decides, as with the detector off. A low one ("Remind
    me, Lord": 0.17) is held. A word guessed where the voice stopped is held whatever the
    probability: it was read after that word."""
    cfg = TurnConfig("words", cap_ms=2000, unmarked_ms=1000, close_p=0.3)
    detector = TurnDetector(cfg, silence_ms=400)
    unsure = detector.judge(1, "Tell me something about dolphins", close_p=0.42)
    assert (unsure.hold_ms, unsure.signal, unsure.detail) == \
        (400, "fixed", "unsure: no closing mark, p(mark) 0.42")
    held = detector.judge(2, "Remind me, Lord", close_p=0.17)
    assert (held.hold_ms, held.detail) == (1000, "no closing mark, p(mark) 0.17")
    assert detector.judge(3, "I'd like to book a table for", close_p=0.9).hold_ms == 2000
    guessed = detector.judge(4, "Remind me to order it", last_word_s=(1.7, 1.72), close_p=0.9)
    assert (guessed.hold_ms, guessed.detail) == (1000, "no closing mark (“it”: no voice)")
    assert TurnDetector(TurnConfig("words", close_p=1.0), 400).judge(
        5, "Tell me something about dolphins", close_p=0.99).hold_ms == 1000


def test_off_is_the_fixed_silence():
    detector = TurnDetector(TurnConfig("off"), silence_ms=400)
    assert not detector.on
    verdict = detector.judge(1, "I'd like to book a table for.")
    assert (verdict.hold_ms, verdict.signal) == (400, "fixed")


class ScriptedAgent:
    """Records the turns the conversation starts and hands their transcript to `heard`; its
    reply's first audio comes 50 ms later, or when `reply_go` is set."""

    ab = None  # no A/B anchor

    def __init__(self, detector: str, text: str, speaks: bool = True) -> None:
        self.cfg = AppConfig(primary=Endpoint("primary", "http://127.0.0.1:9/v1", "m"),
                             turn=TurnConfig(detector, cap_ms=2500))
        self.detector = TurnDetector(self.cfg.turn, self.cfg.vad.silence_ms)
        self.text, self.speaks = text, speaks
        self.started: list[Turn] = []
        self.reply_go: threading.Event | None = None
        self.emitted: dict[int, float] = {}
        """When each turn's reply audio was handed over (perf_counter)."""

    def new_turn(self, session: Session, source: str, last_voiced_ms=None) -> Turn:
        turn = Turn(session, TurnMetrics(session.new_turn_id(), "primary", source=source),
                    last_voiced_ms)
        self.started.append(turn)
        return turn

    def run_turn(self, turn: Turn, audio=None, text: str = "", heard=None,
                 later=None) -> None:
        heard(turn, Transcript(turn.turn_id, self.text, "en", 0.0, 0.0), audio)
        turn.set_user_text(self.text)  # shown once committed
        if self.speaks:  # the reply's first audio: held until the commit
            if self.reply_go is None:
                time.sleep(0.05)
            elif not self.reply_go.wait(10) or turn.cancel.is_set():
                return
            self.emitted[turn.turn_id] = time.perf_counter()
            turn.emit_audio(SpeechChunk(turn.turn_id, 0, np.zeros(1600, np.int16), 16000,
                                        "Paris.", "scripted", time.perf_counter()))
        turn.wait_decided(5.0)  # as the real chain does before it lets the turn go


def frames(audio: np.ndarray, start_ms: float = 0.0) -> list[MicFrame]:
    step = 320  # 20 ms, as the page sends them
    return [MicFrame(i // step, audio[i:i + step], start_ms + (i + step) / 16.0,
                     time.perf_counter()) for i in range(0, len(audio) - step + 1, step)]


def speak(text: str, detector: str, silence_s: float,
          speaks: bool = True) -> tuple[Conversation, Session]:
    """The question, then `silence_s` of silence, through the real endpointer; the
    verdict is awaited between frames as the listener would receive it."""
    speech, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    agent = ScriptedAgent(detector, text, speaks)
    conversation = Conversation(agent)  # type: ignore[arg-type]
    session = Session("s")
    listener = conversation.open(session)
    audio = np.concatenate([speech, np.zeros(int(16000 * silence_s), np.float32)])
    for frame in frames(audio):
        listener.put(frame)
        time.sleep(0.005)  # 4x real time: the verdict and the "TTS" come between frames
    listener.close()
    listener.thread.join(10)
    for turn in agent.started:
        turn.thread.join(10)
    return conversation, session


def test_a_finished_sentence_commits_at_its_verdict_before_its_reply_audio():
    """The end of the turn is decided when the words are known (the first short pause plus
    ASR), not when the reply is ready: the reply's audio goes out when it comes."""
    conversation, session = speak("What is the capital of France?", "words", 1.0)
    (turn,) = conversation.agent.started
    assert turn.committed and turn.metrics.eot_signal == "words: no open ending"
    assert turn.verdict is not None and turn.verdict.hold_ms == 0
    assert turn.stamps["judged"] <= turn.stamps["committed"] \
        < conversation.agent.emitted[turn.turn_id]


def test_a_finished_sentence_without_reply_audio_commits_too():
    conversation, session = speak("What is the capital of France?", "words", 1.0, False)
    (turn,) = conversation.agent.started
    assert turn.committed and turn.metrics.eot_signal == "words: no open ending"


class Page:
    """The conversation with the scripted agent, fed on its own turn-taking thread, and
    what it sent towards the page (an `Outbox` on a loop of the test's own)."""

    def __init__(self, text: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.agent = ScriptedAgent("words", text)
        self.agent.reply_go = threading.Event()
        self.conversation = Conversation(self.agent)  # type: ignore[arg-type]
        handle = self.conversation.handle

        def handle_or_mark(session: Session, item) -> None:
            if isinstance(item, threading.Event):
                item.set()  # every item put before it is handled
            else:
                handle(session, item)

        self.conversation.handle = handle_or_mark  # type: ignore[method-assign]
        self.session = Session("s")
        self.session.outbox = Outbox(self.loop)
        self.listener = self.conversation.open(self.session)
        self.t_ms = 0.0
        self.audio_sent = 0

    def say(self, audio: np.ndarray) -> None:
        """Frames of `audio`, all handled on the turn-taking thread when this returns."""
        for frame in frames(audio, self.t_ms):
            self.listener.put(frame)
        self.t_ms += len(audio) / 16.0
        handled = threading.Event()
        self.listener.put(handled)
        assert handled.wait(10)

    def sent(self) -> int:
        """Reply audio messages sent so far."""
        self.loop.run_until_complete(asyncio.sleep(0))
        queue = self.session.outbox.queue
        while not queue.empty():
            self.audio_sent += not isinstance(queue.get_nowait(), str)
        return self.audio_sent

    def close(self) -> None:
        self.agent.reply_go.set()
        self.listener.close()
        self.listener.thread.join(10)
        for turn in self.agent.started:
            turn.thread.join(10)
        self.loop.close()


def until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def committed_at_its_verdict(text: str) -> tuple[Page, np.ndarray, Turn]:
    """The question, then silence until its verdict committed it (its reply not ready)."""
    speech, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    page = Page(text)
    page.say(speech)  # ends with 0.7 s of silence: the pause, the verdict, the commit
    (first,) = page.agent.started
    assert until(lambda: first.committed)
    return page, speech, first


def test_speech_after_a_commit_cancels_the_reply_unheard_and_continues_the_turn():
    """A pause to think that the verdict took for the end ("...a table for it."): the
    user's voice comes back before the reply was sent. The reply waits while the voice is
    there; when it becomes an utterance the reply is dropped unheard, and the words go on
    in one turn with the rest."""
    page, speech, first = committed_at_its_verdict("What is the capital of France?")
    try:
        page.say(speech[6400:8000])  # 100 ms of the voice back: not an utterance yet
        page.agent.reply_go.set()  # the reply's first audio is ready now
        assert until(lambda: first.audio_ready) and page.sent() == 0  # held for the voice
        page.agent.reply_go.clear()  # the next turn's reply waits, to tell the two apart
        page.say(speech[8000:])  # the voice goes on: an utterance, and its pause
        assert first.cancel.is_set() and page.sent() == 0  # never heard
        page.agent.reply_go.set()
        assert until(lambda: len(page.agent.started) == 2 and page.agent.started[1].committed)
        second = page.agent.started[1]
        assert second.metrics.eot_signal == "words: no open ending (continues turn 1)"
        assert until(lambda: page.sent() == 1)  # the whole sentence's reply is heard
        assert first.metrics.continued_in == second.turn_id and first.metrics.cancelled
        assert [m["content"] for m in page.session.chat] == [page.agent.text, ""]
    finally:
        page.close()


def test_a_reply_held_for_the_voice_goes_when_the_microphone_stops():
    page, speech, first = committed_at_its_verdict("What is the capital of France?")
    try:
        page.say(speech[6400:8000])
        page.agent.reply_go.set()
        assert until(lambda: first.audio_ready) and page.sent() == 0
        page.listener.put(MIC_STOP)  # no more voice can come to drop it
        assert until(lambda: page.sent() == 1) and not first.cancel.is_set()
    finally:
        page.close()


def test_a_click_after_a_commit_delays_the_reply_only_while_it_lasts():
    page, speech, first = committed_at_its_verdict("What is the capital of France?")
    try:
        page.say(speech[6400:8000])  # 100 ms of voice: a cough, a click
        page.agent.reply_go.set()
        assert until(lambda: first.audio_ready) and page.sent() == 0
        page.say(np.zeros(int(16 * (VOICE_GONE_MS + 100)), np.float32))
        assert until(lambda: page.sent() == 1) and not first.cancel.is_set()
        assert "voice_back" in first.stamps
    finally:
        page.close()


def test_a_short_word_after_a_commit_drops_the_reply_unheard_and_continues_the_turn():
    """"I want to go to the beach. | and … | probably have lunch there": a word of 200 ms
    (shorter than `VadConfig.min_speech_ms`) said on after finished-looking words, then a
    pause to think. While the reply is unheard it starts an utterance: the reply is dropped,
    not let go into the pause, and the words join the turn's."""
    page, speech, first = committed_at_its_verdict("What is the capital of France?")
    try:
        page.say(np.concatenate([speech[6400:9600], np.zeros(16 * 700, np.float32)]))
        assert first.cancel.is_set() and page.sent() == 0  # never heard
        page.agent.reply_go.set()
        assert until(lambda: len(page.agent.started) == 2 and page.agent.started[1].committed)
        assert page.agent.started[1].metrics.eot_signal.endswith("(continues turn 1)")
        assert until(lambda: page.sent() == 1)
    finally:
        page.close()


def test_once_the_reply_is_heard_a_short_word_is_no_utterance():
    page, speech, first = committed_at_its_verdict("What is the capital of France?")
    try:
        page.agent.reply_go.set()
        assert until(lambda: page.sent() == 1)  # the reply has gone to the page
        page.say(np.concatenate([speech[6400:9600], np.zeros(16 * 700, np.float32)]))
        assert not first.cancel.is_set() and len(page.agent.started) == 1
    finally:
        page.close()


def reply_ready_with_the_microphone_behind(text: str = "What is the capital of France?"):
    """Committed at its verdict; then no frame for 300 ms (on a busy machine they come in
    late, in bursts) while the reply's first audio becomes ready: it waits for them."""
    page, speech, first = committed_at_its_verdict(text)
    time.sleep(0.3)
    page.agent.reply_go.set()
    assert until(lambda: first.audio_ready) and page.sent() == 0
    assert "mic_behind" in first.stamps
    return page, speech, first


def test_the_voice_in_late_frames_keeps_the_reply_unheard():
    """CI's pause run: the reply was audible 120 ms after the user went on, the frames
    with their voice 240 ms late. The first audio waits until the frames cover the moment
    it was ready; the voice in them holds it, and its utterance drops it unheard."""
    page, speech, first = reply_ready_with_the_microphone_behind()
    try:
        page.say(speech[6400:])  # the user went on: those frames were on their way
        assert first.cancel.is_set() and "first_sent" not in first.stamps  # never heard
    finally:
        page.close()


def test_late_frames_without_voice_let_the_reply_go_once_they_caught_up():
    page, speech, first = reply_ready_with_the_microphone_behind()
    try:
        page.say(np.zeros(int(16 * 800), np.float32))
        assert until(lambda: page.sent() == 1) and not first.cancel.is_set()
        assert first.stamps["first_sent"] >= first.stamps["mic_behind"]
    finally:
        page.close()


def test_a_reply_waiting_for_frames_that_stop_coming_goes_anyway():
    page, speech, first = reply_ready_with_the_microphone_behind()
    try:
        assert until(lambda: page.sent() == 1, timeout_s=5) and not first.cancel.is_set()
    finally:
        page.close()


def test_an_open_ending_holds_the_turn_until_the_cap():
    conversation, session = speak("What is the capital of", "words", 1.0)
    (turn,) = conversation.agent.started
    assert not turn.committed  # 1 s of silence, a 2.5 s cap
    conversation, session = speak("What is the capital of", "words", 3.0)
    (turn,) = conversation.agent.started
    assert turn.committed and turn.metrics.eot_signal.endswith("(cap)")


def test_detector_off_commits_at_the_fixed_silence():
    conversation, session = speak("What is the capital of", "off", 1.0)
    (turn,) = conversation.agent.started
    assert turn.committed and turn.metrics.eot_signal.startswith("silence 4")


def test_frames_reports_and_verdicts_are_handled_on_one_thread_in_order():
    """The page's reports used to be handled on the event loop while the frames were on the
    listener thread, both writing the turn-taking state."""
    agent = ScriptedAgent("off", "")
    conversation = Conversation(agent)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    handle = conversation.handle

    def record(session: Session, item) -> None:
        seen.append((type(item).__name__, threading.current_thread().name))
        handle(session, item)

    conversation.handle = record  # type: ignore[method-assign]
    session = Session("s")
    listener = conversation.open(session)
    silence = np.zeros(320, np.float32)
    items = [MicFrame(0, silence, 20.0, 0.0), PlayerReport("done", 7, 30.0),
             MicFrame(1, silence, 40.0, 0.0), EndOfTurn(7, 0, "words", "", 0.0),
             MicFrame(2, silence, 60.0, 0.0), PlayerReport("audible", 7, 70.0)]
    senders = [threading.Thread(target=listener.put, args=(item,)) for item in items]
    for sender in senders:  # put from other threads, as the event loop and turns do
        sender.start()
        sender.join()
    listener.close()
    listener.thread.join(5)
    assert [kind for kind, _ in seen] == [type(i).__name__ for i in items] + ["str"]
    assert {name for _, name in seen} == {listener.thread.name}
    assert conversation.floor(session).reply_ended_ms == 30.0
