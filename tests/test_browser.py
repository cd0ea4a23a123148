"""The page itself in headless Chromium (Debian's chromium, driven by Playwright): spoken
and typed turns through the real app, and what the browser draws of them."""

from __future__ import annotations

import base64
import time

import httpx
import pytest
import soundfile as sf

from app.web.views import fmt
from bench.page import fake_mic_file, open_page, start_recording, stop_recording
from tests.conftest import (
    APP_LOG,
    ARTIFACTS,
    ASSETS,
    ROOT,
    TRANSCRIPTS,
    app_log,
    log_lines,
    word_recall,
)

pytestmark = pytest.mark.integration
V2V_CELL = "#va-figures td[data-endpoint='primary'][data-figure='v2v_ms']"
SCRIPTED_MIC = (ROOT / "bench" / "scripted_mic.js").read_text()
STAGES = ["end-of-turn wait", "pause seen", "ASR", "end-of-turn verdict", "TTFT", "anchor TTFT",
          "first piece tokens",
          "TTS first audio", "audio held", "transport", "playback start"]


@pytest.fixture
def page_for():
    from playwright.sync_api import sync_playwright

    browsers = []
    with sync_playwright() as pw:
        def open_one(url: str, mic_file=None, init_script: str = ""):
            browser, page = open_page(pw, url, mic_file, init_script=init_script)
            browsers.append(browser)
            return page

        yield open_one
        for b in browsers:
            b.close()


def v2v_filled(page, app_url: str, since: int, timeout_ms: int = 90000) -> float:
    """The page's voice-to-voice figure of its first turn, once drawn; if it is not, the
    failure says what the page and the app had (CI shows only the test output)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            f"() => {{ const e = document.querySelector(\"{V2V_CELL}\");"
            " return e && /[0-9]/.test(e.textContent); }", timeout=timeout_ms)
    except PlaywrightTimeout:
        raise AssertionError("the voice-to-voice figure was not drawn\n"
                             + page_state(page, app_url, since)) from None
    return float(page.inner_text(V2V_CELL).replace(",", ""))


def page_state(page, app_url: str, since: int) -> str:
    """The page's channel and player, what it drew, how often it asked the server for the
    view and how often the server answered, the turns' records and the app's log lines."""
    va = page.evaluate(
        "() => { const v = window.voiceAgent, q = (s) => document.querySelector(s);"
        " return {ready: v.ready, gone: v.gone, sid: v.sid, renders: v.renders,"
        " chunks: v.chunks, log: v.log.slice(-12),"
        " turns: Object.fromEntries(Object.entries(v.turns).map(([k, t]) =>"
        "   [k, {ended: !!t.ended, reported: !!t.reported, pieces: t.pieces.length}])),"
        " status: q('#va-status') && q('#va-status').innerText,"
        " cell: q(\"" + V2V_CELL + "\") && q(\"" + V2V_CELL + "\").textContent,"
        " chat: q('#va-chat') && q('#va-chat').innerText.slice(-300)}; }")
    health = httpx.get(f"{app_url}agent/health", timeout=10).json()
    rows = httpx.get(f"{app_url}agent/export/{va['sid']}.json", timeout=10).json()
    kept = ("turn_id", "endpoint", "final", "v2v_ms", "cancelled", "error", "ran_after_ms")
    return "\n".join([f"page: {va}",
                      f"server: page updates {health.get('page_updates')}",
                      *(f"record: { {k: r.get(k) for k in kept} }" for r in rows),
                      "app log:", *app_log(APP_LOG, since)])


def test_typed_turn_plays_audio_and_shows_figures(app_url, page_for):
    since = log_lines(APP_LOG)
    page = page_for(app_url)
    page.fill("#va-text textarea", "Hello! Who are you?")
    page.press("#va-text textarea", "Enter")
    v2v = v2v_filled(page, app_url, since)
    assert v2v > 0
    # the figures are drawn once the turn's record is final: its reply has played out and
    # the player has said so, not while it still plays
    done = page.evaluate("() => Object.values(window.voiceAgent.turns).map(t => !!t.reported)")
    assert done and all(done), done
    player = page.evaluate("() => ({chunks: window.voiceAgent.chunks, "
                           "played: Object.keys(window.voiceAgent.played).length, "
                           "output: window.voiceAgent.output})")
    assert player["chunks"] >= 1 and player["played"] == 1
    assert player["output"] == "element"  # played through <audio>: echo cancellation sees it
    # the silence inside the reply: what the player scheduled, reported, and recorded
    pieces, done = page.evaluate(
        "() => [Object.values(window.voiceAgent.turns)[0].pieces,"
        " window.voiceAgent.log.find(e => e.type === 'done')]")
    late = [b["start"] - (a["start"] + a["dur"]) for a, b in zip(pieces, pieces[1:], strict=False)]
    assert done["gaps"] == sum(x > 0 for x in late)
    assert done["gap_ms"] == pytest.approx(1000 * sum(x for x in late if x > 0), abs=0.01)
    sid = page.evaluate("() => window.voiceAgent.sid")
    rows = httpx.get(f"{app_url}agent/export/{sid}.json", timeout=10).json()
    row = next(r for r in rows if r["endpoint"] == "primary")
    assert (row["reply_gaps"], row["reply_gap_ms"]) == (done["gaps"],
                                                         round(done["gap_ms"], 1)), row
    # and the page draws it in the turn's figures
    cell = "#va-figures td[data-endpoint='primary'][data-figure='reply_gap_ms']"
    assert page.inner_text(cell).strip() == fmt(row["reply_gap_ms"])
    page.wait_for_function("() => document.querySelector('#va-status').innerText"
                           ".includes('Ready')", timeout=60000)
    assert "Hello! Who are you?" in page.inner_text("#va-chat")
    # the anchor column fills in once the anchor has answered the same messages
    page.wait_for_function(
        "() => /[0-9]/.test(document.querySelector(\"#va-figures td[data-endpoint='anchor']"
        "[data-figure='ttft_ms']\").textContent)", timeout=60000)
    assert "primary vs anchor" in page.inner_text("#va-medians")


def test_spoken_turn_through_the_microphone(app_url, page_for, tmp_path):
    mic = fake_mic_file(tmp_path / "mic.wav", [ASSETS / "en_capital.wav"], gap_s=9)
    since = log_lines(APP_LOG)
    page = page_for(app_url, mic_file=mic)
    start_recording(page)
    v2v = v2v_filled(page, app_url, since)
    stop_recording(page)
    assert v2v > 400  # at least the end-of-turn silence the endpointer waits for
    chat = page.inner_text("#va-chat")
    assert word_recall(TRANSCRIPTS["en_capital.wav"], chat) >= 0.8, chat
    for figure in ("asr_ms", "eot_wait_ms", "ttft_ms", "first_piece_ms", "tts_first_audio_ms",
                   "transport_ms", "playback_ms"):
        cell = page.inner_text(f"#va-figures td[data-endpoint='primary'][data-figure='{figure}']")
        assert any(c.isdigit() for c in cell), figure


def drawn(page, selector: str) -> int:
    """Elements matching `selector` that the browser lays out with a visible size."""
    return page.evaluate(
        "(s) => [...document.querySelectorAll(s)].filter(e => { const r ="
        " e.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&"
        " getComputedStyle(e).visibility !== 'hidden'; }).length", selector)


def test_plots_and_waterfall_draw_after_five_spoken_turns(app_url, page_for):
    """Both endpoints' series are drawn, per turn; the waterfall shows every stage of the
    last turn with its milliseconds; the page fits a laptop's 1280 px; the README's
    screenshot is this page."""
    page = page_for(app_url, init_script=SCRIPTED_MIC)
    page.set_viewport_size({"width": 1280, "height": 1000})
    start_recording(page)
    clips = ["en_capital.wav", "en_joke.wav", "en_weather.wav", "en_hello.wav", "en_capital.wav"]
    for i, name in enumerate(clips, start=1):
        x, _ = sf.read(ASSETS / name, dtype="int16")
        page.evaluate("(b) => window.__mic.play(b, 16000, 1)",
                      base64.b64encode(x.tobytes()).decode())
        # wait until this turn played out and the anchor measured it
        page.wait_for_function("(n) => window.voiceAgent.log.filter(e => e.type === 'done')"
                               ".length >= n", arg=i, timeout=120000)
        page.wait_for_function(
            "(n) => document.querySelectorAll(\"#va-plot-ttft circle[data-series='anchor']\")"
            ".length >= n", arg=i, timeout=60000)
        time.sleep(0.5)
    for plot in ("ttft", "mstok"):
        for series in ("primary", "anchor"):
            marks = drawn(page, f"#va-plot-{plot} circle.va-mark[data-series='{series}']")
            assert marks >= 5, (plot, series, marks)
            assert drawn(page, f"#va-plot-{plot} path.va-line[data-series='{series}']") >= 1
            assert drawn(page, f"#va-plot-{plot} rect.va-legend[data-series='{series}']") == 1
    assert drawn(page, "#va-plot-v2v circle.va-mark") >= 5
    for stage in STAGES:
        bars = drawn(page, f"#va-plot-waterfall rect.va-stage[data-stage='{stage}']")
        assert bars >= 1, stage
    labels = page.evaluate("() => [...document.querySelectorAll('#va-plot-waterfall "
                           ".va-stage-ms')].map(e => e.textContent)")
    assert len(labels) >= len(STAGES) and all(any(c.isdigit() for c in t) for t in labels)
    assert drawn(page, "#va-plot-ab rect.va-ab[data-series='anchor']") == 3
    assert "%" in page.inner_text("#va-plot-ab")
    # usable at 1280 px: no horizontal scrolling of the page
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "page.png", full_page=True)
    page.screenshot(path=ROOT / "docs" / "page.png", full_page=True)
