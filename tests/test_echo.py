"""The reply's echo told by its sound: a real reply in the app's voice, through a simulated
room, against recorded voices (app/stages/echo.py)."""

from __future__ import annotations

import numpy as np
import pytest

from app.messages import RATE, SpeechChunk
from app.stages.echo import ECHO_MATCH, echo_match, sent_audio
from app.stages.interruption import verdict
from bench.echo_match import level, load, reply_audio, through_room
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def reply():
    return reply_audio("en")


def voices(n: int = 6) -> list[np.ndarray]:
    return [load(p) for p in sorted((ROOT / "assets" / "turns").glob("en_complete_*"))[:n]]


def test_the_echo_matches_and_a_voice_over_it_does_not(reply):
    rng = np.random.default_rng(1)
    quiet = rng.standard_normal(len(reply)).astype(np.float32) * 1e-3
    room = through_room(reply, rng, 120)
    for voice in voices():
        n = min(len(voice), 4 * RATE)
        start = int(rng.integers(0, len(reply) - n))
        echo = room[start:start + n] / level(room[start:start + n]) * level(voice[:n])
        assert echo_match(0.3 * echo + quiet[:n], reply) >= ECHO_MATCH  # ten dB down
        assert echo_match(voice[:n] + quiet[:n], reply) < ECHO_MATCH
        # as loud as the echo under it: the user's, never taken for the echo
        assert echo_match(voice[:n] + echo + quiet[:n], reply) < ECHO_MATCH


def test_too_little_to_tell_is_no_match(reply):
    assert echo_match(reply[:RATE // 10], reply) == 0.0  # a tenth of a second
    assert echo_match(reply[:RATE], np.zeros(0, np.float32)) == 0.0  # nothing was sent
    assert echo_match(reply[:RATE], reply[:RATE // 10]) == 0.0  # a tenth of a second was


def test_the_sent_chunks_make_one_track_at_the_asrs_rate():
    tone = (np.sin(np.arange(22050) / 10) * 8000).astype(np.int16)  # a second at 22.05 kHz
    chunks = [SpeechChunk(1, i, tone, 22050, "x", "piper", 0.0) for i in range(2)]
    assert abs(len(sent_audio(chunks)) - 2 * RATE) <= 2
    assert len(sent_audio([])) == 0


def test_an_echo_whose_words_were_misread_is_still_echo():
    # the words a fresh-clone run heard for the reply's "Keep your home cozy"
    said = "Stay warm and keep your home cozy."
    assert verdict("Take your home closing.", said, -0.4) == "words"
    assert verdict("Take your home closing.", said, -0.4, sounds_echo=True) == "echo"
    # a command said over a loud echo: the sound matches the echo, the word still stops it
    assert verdict("Stop, stop.", said, -0.4, sounds_echo=True) == "command"
    assert verdict("Wait a moment.", said + " Wait a moment.", -0.4) == "echo"  # its own words
