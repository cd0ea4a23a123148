"""Smart Turn v3.2 (app/stages/smartturn.py) on the committed recordings, its input, its setup
error.

The model file comes from `python -m app.ops.prepare smartturn`, part of `make models`.
"""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.stages.smartturn import RATE, WINDOW, SmartTurn, features
from tests.conftest import ASSETS

# Where a finished question is cut so that it is plainly unfinished, in seconds. On these
# synthetic (piper) clips the model's score swings with where the cut falls, so each cut
# sits mid-way in a stretch where every 5 ms step scores low. en_hello has no such stretch:
# 45% of its voiced part falls in the pause after "Hello,", which the model rightly calls a
# finished turn, and cuts inside "who are you" score anywhere between 0.05 and 0.95.
CUTS = {
    "en_capital.wav": 1.11,  # "What is the |capital": low from 1.04 s to 1.185 s
    "en_weather.wav": 1.72,  # "How do I stay warm in wi|nter": low from 1.70 s to 1.755 s
}


@pytest.fixture(scope="module")
def smartturn() -> SmartTurn:
    model = SmartTurn(threads=1)
    model.setup()
    return model


def clip(name: str) -> np.ndarray:
    audio, rate = sf.read(ASSETS / name, dtype="float32")
    assert rate == RATE
    return audio


@pytest.mark.parametrize("name", ["en_capital.wav", "en_hello.wav"])
def test_probability(smartturn: SmartTurn, name: str) -> None:
    p = smartturn(clip(name))
    assert isinstance(p, float)
    assert 0.0 <= p <= 1.0


@pytest.mark.parametrize(("name", "cut_s"), CUTS.items())
def test_finished_question_scores_above_its_cut(smartturn: SmartTurn, name: str,
                                                 cut_s: float) -> None:
    audio = clip(name)
    full, cut = smartturn(audio), smartturn(audio[:int(cut_s * RATE)])
    assert full > 0.5 > cut, (full, cut)


@pytest.mark.parametrize("seconds", [0.3, 8.0, 10.0])
def test_features_cover_the_last_8_s(seconds: float) -> None:
    audio = np.random.default_rng(0).standard_normal(int(seconds * RATE)).astype(np.float32)
    x = features(audio)
    assert x.shape == (1, 80, 800)
    assert x.dtype == np.float32
    # shorter audio is padded with silence in front, longer keeps its last 8 s
    window = np.pad(audio, (max(0, WINDOW - len(audio)), 0))[-WINDOW:]
    np.testing.assert_array_equal(x, features(window))


def test_missing_model_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="python -m app.ops.prepare smartturn"):
        SmartTurn(tmp_path / "missing.onnx").setup()
