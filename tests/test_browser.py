"""The page itself in headless Chromium (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import pytest

from bench.page import fake_mic_file, open_page, start_recording, stop_recording
from tests.conftest import ARTIFACTS, ASSETS, TRANSCRIPTS, word_recall

pytestmark = pytest.mark.integration
V2V_CELL = "#va-figures td[data-endpoint='primary'][data-figure='v2v_ms']"


@pytest.fixture
def page_for():
    from playwright.sync_api import sync_playwright

    browsers = []
    with sync_playwright() as pw:
        def open_one(url: str, mic_file=None):  # noqa: ANN001, ANN202
            browser, page = open_page(pw, url, mic_file)
            browsers.append(browser)
            return page

        yield open_one
        for b in browsers:
            b.close()


def v2v_filled(page, timeout_ms: int = 90000) -> float:
    page.wait_for_function(
        f"() => {{ const e = document.querySelector(\"{V2V_CELL}\");"
        " return e && /[0-9]/.test(e.textContent); }", timeout=timeout_ms)
    return float(page.inner_text(V2V_CELL).replace(",", ""))


def test_typed_turn_plays_audio_and_shows_figures(app_url, page_for):
    page = page_for(app_url)
    page.fill("#va-text textarea", "Hello! Who are you?")
    page.press("#va-text textarea", "Enter")
    v2v = v2v_filled(page)
    assert v2v > 0
    player = page.evaluate("() => ({chunks: window.voiceAgent.chunks, "
                           "played: Object.keys(window.voiceAgent.played).length})")
    assert player["chunks"] >= 1 and player["played"] == 1
    page.wait_for_function("() => document.querySelector('#va-status').innerText"
                           ".includes('Ready')", timeout=60000)
    chat = page.inner_text("#va-chat")
    assert "Hello! Who are you?" in chat
    ttft = page.inner_text("#va-figures td[data-endpoint='primary'][data-figure='ttft_ms']")
    assert any(c.isdigit() for c in ttft)
    # the anchor column fills in once the anchor has answered the same messages
    page.wait_for_function(
        "() => /[0-9]/.test(document.querySelector(\"#va-figures td[data-endpoint='anchor']"
        "[data-figure='ttft_ms']\").textContent)", timeout=60000)
    assert "primary vs anchor" in page.inner_text("#va-medians")
    assert page.locator("#va-plot-ttft").is_visible()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "page_text_turn.png", full_page=True)


def test_spoken_turn_through_the_microphone(app_url, page_for, tmp_path):
    mic = fake_mic_file(tmp_path / "mic.wav", [ASSETS / "en_capital.wav"], gap_s=9)
    page = page_for(app_url, mic_file=mic)
    start_recording(page)
    v2v = v2v_filled(page)
    stop_recording(page)
    assert v2v > 400  # at least the end-of-speech silence the VAD waits for
    chat = page.inner_text("#va-chat")
    assert word_recall(TRANSCRIPTS["en_capital.wav"], chat) >= 0.8, chat
    asr = page.inner_text("#va-figures td[data-endpoint='primary'][data-figure='asr_ms']")
    assert any(c.isdigit() for c in asr)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "page_spoken_turn.png", full_page=True)
