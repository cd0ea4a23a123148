"""The page itself in headless Chromium (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import ARTIFACTS, ASSETS, TRANSCRIPTS, word_recall

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
V2V_CELL = "#va-figures td[data-figure='v2v_ms']"


def fake_mic(path, clip: str) -> None:
    """Chromium loops this file as its microphone: one utterance, then a long pause."""
    speech, rate = sf.read(ASSETS / clip, dtype="float32")
    audio = np.concatenate([np.zeros(rate // 2, np.float32), speech,
                            np.zeros(rate * 9, np.float32)])
    up = np.interp(np.arange(len(audio) * 3) / 3, np.arange(len(audio)), audio)
    sf.write(path, up.astype(np.float32), rate * 3, subtype="PCM_16")


@pytest.fixture
def page_for(tmp_path):
    from playwright.sync_api import sync_playwright

    browsers = []
    with sync_playwright() as pw:
        def open_page(url: str, mic_file=None):  # noqa: ANN001, ANN202
            args = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
                    "--disable-background-networking", "--disable-component-update",
                    "--autoplay-policy=no-user-gesture-required",
                    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
            if mic_file:
                args.append(f"--use-file-for-fake-audio-capture={mic_file}")
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
            browsers.append(browser)
            ctx = browser.new_context(viewport={"width": 1400, "height": 1100},
                                      permissions=["microphone"])
            page = ctx.new_page()
            page.goto(url)
            page.wait_for_selector("#va-text textarea", timeout=60000)
            page.wait_for_function("() => window.voiceAgent && window.voiceAgent.sid")
            page.click("h2")  # a user gesture: the page may now play audio
            return page

        yield open_page
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
    ttft = page.inner_text("#va-figures td[data-figure='ttft_ms']")
    assert any(c.isdigit() for c in ttft)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "page_text_turn.png", full_page=True)


def test_spoken_turn_through_the_microphone(app_url, page_for, tmp_path):
    mic = tmp_path / "mic.wav"
    fake_mic(mic, "en_capital.wav")
    page = page_for(app_url, mic_file=mic)
    page.locator("button.record-button").first.click()
    v2v = v2v_filled(page)
    page.locator("button.stop-button").first.click()
    assert v2v > 400  # at least the end-of-speech silence the VAD waits for
    chat = page.inner_text("#va-chat")
    assert word_recall(TRANSCRIPTS["en_capital.wav"], chat) >= 0.8, chat
    asr = page.inner_text("#va-figures td[data-figure='asr_ms']")
    assert any(c.isdigit() for c in asr)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "page_spoken_turn.png", full_page=True)
