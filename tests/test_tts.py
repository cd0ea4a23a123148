import time

import numpy as np
import pytest

from app.stages.audio import rms_dbfs
from app.stages.tts import FallbackTts, TtsError, language_of
from app.stages.tts.base import TtsConfig
from app.stages.tts.edge import EdgeTts
from app.stages.tts.espeak import EspeakTts
from app.stages.tts.kokoro import KokoroTts
from app.stages.tts.piper import PiperTts

pytestmark = pytest.mark.integration


def assert_speech(pcm: np.ndarray, rate: int, min_s: float = 0.5) -> None:
    assert pcm.dtype == np.int16 and rate in (16000, 22050, 24000)
    assert len(pcm) / rate >= min_s
    assert rms_dbfs(pcm) > -35  # not silence


@pytest.mark.parametrize("engine", [PiperTts(), EspeakTts()], ids=["piper", "espeak"])
def test_offline_engines_speak_english(engine):
    engine.setup()
    assert_speech(*engine.synthesize("Hello, this is a test of the voice.", "en"))


def test_espeak_speaks_mandarin():
    assert_speech(*EspeakTts().synthesize("你好，今天天气很好。", "zh"))


def test_kokoro_speaks_mandarin_that_whisper_understands():
    from app.stages.asr import Asr
    from app.stages.asr_config import AsrConfig
    from app.stages.audio import resample
    from tests.conftest import word_recall

    tts = KokoroTts(threads=1)
    tts.setup()
    # its own pool, as asked, that does not spin (the package's would take every core)
    options = tts.model.sess.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    pcm, rate = tts.synthesize("我们明天下午去公园散步吧。", "zh")
    assert_speech(pcm, rate)
    asr = Asr(AsrConfig(language="zh"))
    heard = asr.process(1, resample(pcm.astype("float32") / 32768, rate)).text
    assert word_recall("我们明天下午去公园散步吧", heard) >= 0.7, heard


def test_edge_outage_falls_back_at_once_and_says_so():
    # edge-tts through a proxy port that refuses connections: a real connection failure
    edge = EdgeTts(TtsConfig(edge_proxy="http://127.0.0.1:9", edge_timeout_s=1.0))
    with pytest.raises(TtsError):
        edge.synthesize("Hello there.", "en")
    tts = FallbackTts([edge, PiperTts(), EspeakTts()], retry_after_s=60)
    tts.setup()
    pcm, rate, name, note = tts.synthesize("Hello there, how are you?", "en")
    assert name == "piper" and "edge" in note
    assert_speech(pcm, rate)
    # remembered as down: the next piece does not wait for edge again
    t0 = time.perf_counter()
    _, _, name, note = tts.synthesize("Second sentence.", "en")
    assert name == "piper" and "edge" in note
    assert time.perf_counter() - t0 < 1.0


def test_language_routing():
    assert language_of("你好，今天怎么样？") == "zh"
    assert language_of("Hello there") == "en"
    assert language_of("123", default="zh") == "zh"
    tts = FallbackTts([PiperTts(), KokoroTts(), EspeakTts()])
    _, _, name, _ = tts.synthesize("你好。", "zh")
    assert name == "kokoro"  # piper's voice is English-only and is skipped, not marked down
    _, _, name, _ = tts.synthesize("Hello.", "en")
    assert name == "piper"
    # `--tts piper` (a host without a Mandarin voice): piper reads it, and says so
    alone = FallbackTts([PiperTts()])
    alone.setup()
    pcm, _, name, note = alone.synthesize("你好。", "zh")
    assert name == "piper" and len(pcm) > 0 and note == "no zh voice: read by piper"


def test_edge_hanging_service_falls_back_within_a_second():
    import socket
    import threading

    # a "proxy" that accepts connections and never answers: a stalled service
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    try:
        port = server.getsockname()[1]
        tts = FallbackTts([EdgeTts(TtsConfig(edge_proxy=f"http://127.0.0.1:{port}")),
                           PiperTts(), EspeakTts()])
        tts.setup()
        t0 = time.perf_counter()
        pcm, rate, name, note = tts.synthesize("Hello there, how are you?", "en")
        took = time.perf_counter() - t0
    finally:
        stop.set()
        server.close()
        for conn in held:
            conn.close()
    assert name == "piper" and "no audio within 0.8 s" in note
    assert_speech(pcm, rate)
    assert took < 1.5  # 0.8 s edge deadline + piper; docs/RELIABILITY.md records the figure
