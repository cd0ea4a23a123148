import pytest
import soundfile as sf

from app.asr import Asr
from app.audio import load_upload
from app.config import AsrConfig
from tests.conftest import ASSETS, TRANSCRIPTS, word_recall

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def asr():
    model = Asr(AsrConfig(language="auto"))
    model.setup()
    return model


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_transcribes_committed_recordings(asr, name):
    audio = load_upload(ASSETS / name, max_seconds=30, max_mb=20)
    result = asr.process(1, audio)
    assert result.language == name[:2]
    assert word_recall(TRANSCRIPTS[name], result.text) >= 0.8, result.text
    assert result.asr_end > result.asr_start


def test_fixed_language(asr):
    audio, _ = sf.read(ASSETS / "en_hello.wav", dtype="float32")
    assert word_recall("hello who are you", asr.process(2, audio, language="en").text) >= 0.75


def test_missing_model_dir_says_what_to_do():
    with pytest.raises(SystemExit, match="make models"):
        Asr(AsrConfig(model="/nonexistent/whisper")).setup()
