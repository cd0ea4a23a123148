"""Turn-taking in the real page (headless Chromium, real VAD, ASR, vLLM and TTS), each
scenario repeated and its outcomes counted: the agent's own voice fed back into the
microphone, a real interruption, a cough and an "mhm", a Mandarin question.

The page's microphone is scripted (bench/scripted_mic.js): clips are played into it at the
moment the scenario needs (for instance one second after the reply became audible), and
the echo scenario mixes the page's own playback into it, with no echo cancellation.
Counts, interrupt-to-silence and the command go to tests/artifacts/turn_taking.json
(docs/RELIABILITY.md).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
import soundfile as sf

from app.metrics import percentile
from app.ops.machine import machine
from app.stages.audio import resample
from app.stages.endofturn import unfinished_ending
from app.stages.vad import FRAME_MS, PRE_ROLL_FRAMES
from bench.page import SCRIPTED_MIC, launch, load, say, start_recording, user_messages, visitor
from bench.page import player_log as log
from tests.conftest import (
    ARTIFACTS,
    ASSETS,
    ROOT,
    app_args,
    app_log,
    log_lines,
    running_app,
    word_recall,
)

pytestmark = pytest.mark.integration
RUNS = 10
NEEDED = 9  # of RUNS
# The Mandarin scenarios check a path (the language heard, the notice or the Mandarin
# voice), not a timing: five runs each. They were the suite's two slowest tests (a 2-core
# AVX2 EPYC: 244 and 287 s at ten runs, Whisper base and kokoro on the busy cores).
ZH_RUNS, ZH_NEEDED = 5, 4
RESULTS: dict[str, dict] = {}
LOG = ROOT / "logs" / "app-turn-taking.log"


@pytest.fixture(scope="module")
def tt_url(endpoint):
    """The app with the demo preset (languages: English; Mandarin detected by Whisper base),
    short replies so that each run plays one out (20 tokens: ~4 s of speech, time enough to
    interrupt it 1 s in)."""
    # no reply budget: two short sentences can be over before the interruption said a
    # second into the reply is checked
    with running_app([*app_args(endpoint, max_tokens=20), "--reply-sentences", "0",
                      "--reply-seconds", "0"], LOG) as url:
        yield url


@pytest.fixture(scope="module", autouse=True)
def results():
    """The counts of the scenarios that ran, over those of an earlier run."""
    yield RESULTS
    path = ARTIFACTS / "turn_taking.json"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **RESULTS}, indent=1, ensure_ascii=False))


@pytest.fixture(scope="module")
def zh_url(endpoint):
    """The same model declared Mandarin-capable (`--model-languages en,zh`), with a persona
    that asks for Mandarin answers to Mandarin questions."""
    with running_app([*app_args(endpoint, max_tokens=20), "--model-languages", "en,zh",
                      "--persona", str(ROOT / "persona" / "small-en-zh.md")],
                     ROOT / "logs" / "app-turn-taking-zh.log") as url:
        yield url


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """16 kHz int16 clips: questions (committed recordings), an interruption, an "mhm"
    (piper, a voice of the tests), a cough (a noise burst)."""
    from app.stages.tts.piper import PiperTts

    piper = PiperTts()
    piper.setup()

    def said(text: str) -> np.ndarray:
        pcm, rate = piper.synthesize(text, "en")
        return (resample(pcm.astype(np.float32) / 32768, rate, 16000) * 32767).astype(np.int16)

    def asset(name: str) -> np.ndarray:
        x, _ = sf.read(ASSETS / name, dtype="int16")
        return x

    rng = np.random.default_rng(1)
    t = np.arange(int(16000 * 0.45)) / 16000
    burst = rng.standard_normal(len(t)) * np.exp(-t / 0.12) * (1 - np.exp(-t / 0.01))
    cough = (np.convolve(burst, np.ones(8) / 8, "same") * 9000).astype(np.int16)
    return {"question": asset("en_weather.wav"), "zh": asset("zh_weather.wav"),
            "stop": said("Wait, stop! Tell me about dogs instead."), "mhm": said("Mhm."),
            "cough": cough}


def wait_for(page, pred, timeout_s: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entries = log(page)
        if pred(entries):
            return entries
        time.sleep(0.1)
    raise AssertionError("timed out\n" + failed([], page))


def reports(entries: list[dict], kind: str) -> list[dict]:
    return [e for e in entries if e["type"] == kind]


@contextmanager
def chromium():
    """One browser and one visitor for a scenario's runs, the scripted microphone in each of
    its pages (a launch costs ~2 s; a page opened and recording took 2.3 s in the visitor's
    warm context against 3.1 s in a new one, whose scripts are fetched and compiled again)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            yield visitor(browser, SCRIPTED_MIC)
        finally:
            browser.close()


@contextmanager
def new_page(ctx, url: str):
    """A new page: a new session, a new conversation, recording."""
    pg = load(ctx.new_page(), url)
    try:
        start_recording(pg)
        yield pg
    finally:
        pg.close()


@pytest.fixture
def page(tt_url):
    with chromium() as ctx, new_page(ctx, tt_url) as pg:
        yield pg


def ending(entries: list[dict], turn: int) -> str | None:
    """"done" if the reply of `turn` played to its end, "stopped" if it was cut, else None."""
    return next((x["type"] for x in entries
                 if x["type"] in ("done", "stopped") and x["turn"] == turn), None)


def playing(page, turn: int) -> bool:
    """The reply of `turn` has neither played out nor been stopped yet."""
    return ending(log(page), turn) is None


def quiet(entries: list[dict]) -> bool:
    """Every reply that became audible has played out or been stopped."""
    over = {x["turn"] for x in entries if x["type"] in ("done", "stopped")}
    return all(x["turn"] in over for x in reports(entries, "audible"))


def ask_and_wait_audible(page, clips) -> int:
    """Once the agent is silent (as a person would wait), say the question; return the turn
    id of the reply once it is audible. A run that went wrong (the echo taken for a question)
    does not spill into the next: a turn the echo made has its reply heard out first."""
    try:  # every user turn's reply audible once and over
        wait_for(page, lambda e: quiet(e) and len(user_messages(page)) <= len(
            reports(e, "audible")), timeout_s=20)
    except AssertionError:  # a turn with no reply to wait for (merged into the next)
        wait_for(page, quiet)
    before = len(reports(log(page), "audible"))
    say(page, clips["question"])
    entries = wait_for(page, lambda e: len(reports(e, "audible")) > before)
    return reports(entries, "audible")[-1]["turn"]


def finished(page, turn: int, timeout_s: float = 60.0) -> str:
    """"done" if the reply played to its end, "stopped" if it was cut."""
    return ending(wait_for(page, lambda e: ending(e, turn) is not None, timeout_s), turn)


def failed(outcomes: list[bool], page=None, since: int = 0, **extra: object) -> str:
    """A failure message in full (pytest shortens a non-string one): the outcomes, the
    app's checks, the player's last reports."""
    box = machine()
    lines = [f"outcomes: {outcomes}", f"on: {box['cpu']}, {' '.join(box['isa'])}",
             *(f"{k}: {v}" for k, v in extra.items()),
             "the app's interruption checks:", *app_log(LOG, since)]
    if page is not None:
        lines += ["the player's last reports:", *map(str, log(page)[-30:])]
    return "\n".join(lines)


def record(name: str, outcomes: list[bool], **extra: object) -> None:
    box = machine()
    RESULTS[name] = {"runs": len(outcomes), "as_expected": sum(outcomes), **extra,
                     "command": "pytest tests/test_turn_taking.py",
                     "machine": f"{box['cpu']}, {box['cores']} cores, {' '.join(box['isa'])}"}


def test_own_voice_through_the_speakers_does_not_interrupt(page, clips):
    since = log_lines(LOG)
    page.evaluate("() => window.__mic.echo(0.7, 60)")  # the room: 60 ms, -3 dB
    outcomes = []
    for _ in range(RUNS):
        turn = ask_and_wait_audible(page, clips)
        outcomes.append(finished(page, turn) == "done")
        time.sleep(0.8)
    record("echo: the agent's reply fed back into the microphone", outcomes)
    assert sum(outcomes) >= NEEDED, failed(outcomes, page, since)
    # the echo did not become turns of its own: every user message is the question
    users = page.evaluate("() => [...document.querySelectorAll('#va-chat .message-row.user-row')]"
                          ".map(e => e.innerText)")
    assert sum("stay warm" not in u.lower() for u in users) <= RUNS - NEEDED, \
        failed(outcomes, page, since, user_messages=users)


def test_a_real_interruption_stops_the_reply_fast_and_cuts_history(tt_url, clips):
    """Each run is a new page, a new conversation: the question's first answer is a list of
    several sentences. In one page the 135M model's answers shrank as its history filled
    with interruptions, until one ended before "Wait, stop" was said (a make test run:
    5 of 10, each miss a reply already over)."""
    since = log_lines(LOG)
    outcomes, silences, misses, split, loudness = [], [], [], [], []
    with chromium() as ctx:
        for _ in range(RUNS):
            with new_page(ctx, tt_url) as page:
                turn = ask_and_wait_audible(page, clips)
                time.sleep(1.0)
                say(page, clips["stop"])
                result = finished(page, turn)
                stopped = reports(log(page), "stopped")
                ok = result == "stopped" and bool(stopped) and stopped[-1]["turn"] == turn
                if ok:
                    silence = page.evaluate("(t) => window.voiceAgent.interrupts[t]", turn)
                    heard = stopped[-1]["heard"]
                    ok = silence is not None and 0 < sum(heard) < len(heard)
                    if silence is not None:
                        silences.append(round(silence, 1))
                        split.append(silence_split(log(page), turn))
                # the interruption itself becomes the next turn, answered: its reply heard
                # (not played out: the page closes, as a caller may hang up, ~5 s a run),
                # in samples out of the player: a stop leaves it silenced for nothing after
                wait_for(page, lambda e, t=turn: any(x["type"] == "audible" and
                                                     x["turn"] > t for x in e))
                loudest = loudest_db(page)
                chat = page.inner_text("#va-chat")
                ok = ok and "[interrupted]" in chat and "dogs" in chat.lower() and loudest > -50
                loudness.append(round(loudest, 1))
                outcomes.append(ok)
                if not ok:
                    misses.append({"result": result, "chat": chat[-600:], "loudest_db": loudest,
                                   "reports": log(page)[-12:]})
    record("interruption (\"Wait, stop! ...\") during the reply", outcomes,
           interrupt_to_silence_ms={"p50": percentile(silences, 50),
                                    "p90": percentile(silences, 90), "all": silences},
           to_the_page_to_its_main_thread_to_silence_ms=split,
           next_reply_loudest_dbfs=loudness)
    assert sum(outcomes) >= NEEDED, failed(outcomes, None, since, silences=silences,
                                           misses=misses)


def loudest_db(page, seconds: float = 2.0) -> float:
    """The loudest 10 ms (dBFS) of what the page's player puts out over the next `seconds`:
    its <audio> element's stream, after the gate the socket's Worker closes on a pause or
    stop."""
    return page.evaluate("""(s) => new Promise(async (done) => {
      const ctx = new AudioContext();
      await ctx.resume();  // listening from here on, whatever the busy box's start took
      const an = ctx.createAnalyser();
      an.fftSize = 512;
      ctx.createMediaStreamSource(window.voiceAgent.el.srcObject).connect(an);
      const x = new Float32Array(an.fftSize);
      let top = -200;
      const every = setInterval(() => {
        an.getFloatTimeDomainData(x);
        let e = 0;
        for (const v of x) e += v * v;
        top = Math.max(top, 10 * Math.log10(e / x.length + 1e-12));
      }, 10);
      setTimeout(() => { clearInterval(every); ctx.close(); done(top); }, s * 1000);
    })""", seconds)


def silence_split(entries: list[dict], turn: int) -> list[float] | None:
    """Interrupt-to-silence in three, from the first report that silenced `turn` (a pause,
    else the stop): from the voice's frame to the command reaching the page's socket (its
    Worker), from there to the page's main thread handling it, and from there to the
    silence (a 10 ms fade and the output's latency; below zero where the gate had silenced
    the player before the main thread ran)."""
    first = next((x for x in entries if x["type"] in ("paused", "stopped")
                  and x["turn"] == turn and x.get("handled_ms") is not None), None)
    if first is None or first.get("cause_ms") is None:
        return None
    return [round(first["arrived_ms"] - first["cause_ms"], 1),
            round(first["handled_ms"] - first["arrived_ms"], 1),
            round(first["t_ms"] - first["handled_ms"], 1)]


@pytest.mark.parametrize("noise", ["cough", "mhm"])
def test_a_cough_or_mhm_does_not_cancel_the_reply(tt_url, clips, noise):
    """As expected only if the noise began while the reply played and the reply then played
    to its end. Each run a new page, so the answer is the long first one."""
    since = log_lines(LOG)
    outcomes, misses = [], []
    with chromium() as ctx:
        for _ in range(RUNS):
            with new_page(ctx, tt_url) as page:
                turn = ask_and_wait_audible(page, clips)
                time.sleep(1.0)
                say(page, clips[noise])
                during = playing(page, turn)
                result = finished(page, turn)
                chat = page.inner_text("#va-chat")
                ok = during and result == "done" and "[interrupted]" not in chat
                outcomes.append(ok)
                if not ok:
                    misses.append({"during": during, "result": result,
                                   "reports": log(page)[-12:]})
    record(f"{noise} during the reply", outcomes)
    assert sum(outcomes) >= NEEDED, failed(outcomes, None, since, misses=misses)


def test_mandarin_on_the_english_demo_gets_a_notice(page, clips):
    outcomes = []
    for run in range(ZH_RUNS):
        before = len(reports(log(page), "done"))
        say(page, clips["zh"])
        wait_for(page, lambda e, n=before: len(reports(e, "done")) > n)
        chat = page.inner_text("#va-chat")
        # the transcript (Whisper writes some in traditional characters) and the notice
        outcomes.append(chat.count("只会说英语") == run + 1 and chat.count("今天天") >= run + 1)
        time.sleep(0.5)
    record("Mandarin question, English-only model: notice in both languages", outcomes)
    assert sum(outcomes) >= ZH_NEEDED, outcomes
    assert "only English" in page.inner_text("#va-chat")


def test_mandarin_with_a_mandarin_capable_setting_gets_a_mandarin_reply(zh_url, clips):
    """No notice: the Mandarin transcript goes to the model, its Chinese reply is spoken by
    the Mandarin voice and played. (The embedded 135M model writes Chinese characters when
    asked to, not sense: this checks the path, not the answer.)"""
    outcomes, replies = [], []
    with chromium() as ctx:
        for _ in range(ZH_RUNS):  # each in a new page: the tiny model drifts with history
            with new_page(ctx, zh_url) as page:
                sid = page.evaluate("() => window.voiceAgent.sid")
                say(page, clips["zh"])
                entries = wait_for(page, lambda e: len(reports(e, "done")) > 0)
                turn = reports(entries, "done")[-1]["turn"]
                rows = httpx.get(f"{zh_url}agent/export/{sid}.json", timeout=10).json()
                row = next(r for r in rows if r["turn_id"] == turn and r["endpoint"] == "primary")
                reply = page.evaluate("() => [...document.querySelectorAll("
                                      "'#va-chat .message-row.bot-row')].map(e => e.innerText)"
                                      ".pop()")
                replies.append(reply)
                outcomes.append(not row["error"] and "kokoro" in row["tts_engine"]
                                and has_cjk(reply) and "只会说" not in reply)
    record("Mandarin question, Mandarin-capable setting: a Mandarin reply, spoken", outcomes)
    assert sum(outcomes) >= ZH_NEEDED, (outcomes, replies)


PAUSES_MS = [600 + round(300 * i / (RUNS - 1)) for i in range(RUNS)]  # 600 ... 900
PRE_ROLL_MS = PRE_ROLL_FRAMES * FRAME_MS  # the audio a turn keeps before its first word


def paused_sentences(open_half: bool = True) -> list[tuple[dict, np.ndarray]]:
    """The labelled set's English sentences with a pause inside (voices no other test uses),
    the pause made 600-900 ms long: each run is another sentence, another pause. Each label
    also says how many seconds of voice come before and after the pause.

    `open_half`: those whose words before the pause end open ("a table for", "the train
    or"), the pauses the issue is about; else those whose first half reads as a sentence of
    its own ("Remind me to order", "My meeting with the manager"): no words can hold them,
    and on a fast box the reply is heard inside the pause (recorded, not bounded)."""
    labels = json.loads((ASSETS / "turns" / "labels.json").read_text())
    chosen = [lb for lb in labels if lb["kind"] == "pause" and lb["lang"] == "en"
              and (unfinished_ending(lb["prefix"]) is not None) == open_half]
    chosen = chosen[:RUNS]
    pauses = PAUSES_MS if open_half else [750] * len(chosen)
    out = []
    for lb, pause_ms in zip(chosen, pauses, strict=True):
        x, _ = sf.read(ASSETS / "turns" / lb["file"], dtype="int16")
        at, was = int(lb["pause_at_s"] * 16000), int(lb["pause_ms"] * 16)
        voice_from = int(np.argmax(np.abs(x) > 650))  # -34 dBFS: the first word
        spans = {"before_s": (at - voice_from) / 16000,
                 "after_s": lb["speech_end_s"] - (at + was) / 16000}
        gap = np.zeros(pause_ms * 16, np.int16)
        out.append((lb | spans | {"pause_ms": pause_ms},
                    np.concatenate([x[:at], gap, x[at + was:]])))
    return out


def say_paused(page, tt_url: str, sentences: list[tuple[dict, np.ndarray]]) -> dict:
    """Say each sentence with its pause; per run whether it stayed one turn with the whole
    sentence and no reply to its first half heard, and what was seen."""
    seen: dict[str, list] = {"outcomes": [], "misses": [], "decided_by": [],
                             "reply_to_the_first_half_heard": [],
                             "both_halves_in_the_transcript": []}
    sid = page.evaluate("() => window.voiceAgent.sid")
    for label, pcm in sentences:
        wait_for(page, quiet)
        users = user_messages(page)
        entries = log(page)
        before, audible = len(reports(entries, "done")), len(reports(entries, "audible"))
        say(page, pcm)
        wait_for(page, lambda e, n=before: len(reports(e, "done")) > n, timeout_s=90)
        time.sleep(1.0)  # a reply to the sentence's second half would have started by now
        new = user_messages(page)[len(users):]
        rest = label["text"][len(label["prefix"]):]
        # a reply to the first half that became audible ended the turn too, though the
        # rest then continued it (one message in the chat)
        heard_half = len(reports(log(page), "audible")) - audible > 1
        rows = httpx.get(f"{tt_url}agent/export/{sid}.json", timeout=10).json()
        last = [r for r in rows if r["endpoint"] == "primary"][-1]
        # the turn was read from both halves: its audio holds the voice before the pause
        # and at least half of the voice after it (a turn of the first half alone: the
        # first half, the pre-roll and a little silence); judged on the audio, not on what
        # Whisper made of it (tiny.en misreads these voices more on a busy box)
        heard_ms = last["utterance_ms"] or 0
        whole = heard_ms >= 1000 * (label["before_s"] + label["after_s"] / 2) + PRE_ROLL_MS
        ok = len(new) == 1 and whole and not heard_half
        seen["outcomes"].append(ok)
        seen["decided_by"].append(last["eot_signal"])
        seen["reply_to_the_first_half_heard"].append(heard_half)
        seen["both_halves_in_the_transcript"].append(
            word_recall(rest, " ".join(new)) >= 0.5
            and word_recall(label["prefix"], " ".join(new)) >= 0.5)
        if not ok:
            seen["misses"].append({"said": label["text"], "pause_ms": label["pause_ms"],
                                   "user_messages": new, "turn_audio_ms": heard_ms,
                                   "voice_before_after_s": (label["before_s"],
                                                            label["after_s"])})
    return seen


def test_a_pause_inside_a_sentence_does_not_end_the_turn(page, tt_url):
    """"I'd like to book a table for ... two people at eight tonight": one turn, the whole
    sentence, answered once. With the fixed silence every such pause cut the user off.
    Sentences whose first half is a sentence of its own ("Remind me to order ... tickets
    for the concert") are said too, and recorded apart: nothing in the words tells them
    from a finished command."""
    since = log_lines(LOG)
    seen = say_paused(page, tt_url, paused_sentences())
    outcomes, misses = seen.pop("outcomes"), seen.pop("misses")
    record("a 600-900 ms pause inside a sentence (the turn is not cut)", outcomes,
           pauses_ms=PAUSES_MS, **seen)
    halves = say_paused(page, tt_url, paused_sentences(open_half=False))
    record("a 750 ms pause after a first half that is a sentence of its own (not bounded)",
           halves.pop("outcomes"), **halves)
    assert sum(outcomes) >= NEEDED, failed(outcomes, page, since, misses=misses)


def test_a_finished_question_is_answered_once_and_its_commit_is_recorded(page, tt_url):
    """The other half of the end-of-turn decision: finished questions (the labelled set's,
    voices no other test uses) each become one turn. How long after the last voiced frame
    each committed is recorded (tests/artifacts/turn_taking.json), not asserted."""
    labels = json.loads((ASSETS / "turns" / "labels.json").read_text())
    chosen = [lb for lb in labels if lb["kind"] == "complete" and lb["lang"] == "en"][-RUNS:]
    sid = page.evaluate("() => window.voiceAgent.sid")
    outcomes, waits, signals = [], [], []
    for label in chosen:
        x, _ = sf.read(ASSETS / "turns" / label["file"], dtype="int16")
        wait_for(page, quiet)
        users = user_messages(page)
        before = len(reports(log(page), "done"))
        say(page, x)
        wait_for(page, lambda e, n=before: len(reports(e, "done")) > n, timeout_s=90)
        new = user_messages(page)[len(users):]
        outcomes.append(len(new) == 1 and word_recall(label["text"], new[0]) >= 0.5)
        row = httpx.get(f"{tt_url}agent/export/{sid}.json", timeout=10).json()[-1]
        waits.append(row["eot_wait_ms"])
        signals.append(row["eot_signal"])
    known = [w for w in waits if w is not None]
    record("a finished question becomes one turn", outcomes, signals=signals,
           eot_wait_ms={"p50": percentile(known, 50), "p90": percentile(known, 90),
                        "all": waits})
    assert sum(outcomes) >= NEEDED, (outcomes, signals)


def has_cjk(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)
