"""`--workers N --tts-shared`: the parent's one voice reads every worker's clauses
(app/stages/tts/host.py), as each worker's own would, and its failures reach the worker's
turn as the voice's own."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from app.stages.audio import rms_dbfs
from app.stages.tts import TtsError, build_tts
from app.stages.tts.base import TtsConfig
from app.stages.tts.host import KEY_ENV, RemoteTts, TtsHost, readers

pytestmark = pytest.mark.integration

LINES = ["The capital of France is Paris.", "It will be sunny tomorrow.",
         "Here is a short joke.", "Hello there, how can I help?"]


def test_readers_share_the_cores():
    assert [readers(n) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]


def test_workers_share_the_parents_voice(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(SystemExit, match=KEY_ENV):  # a worker started by hand
        RemoteTts(str(tmp_path / "tts.sock")).setup()
    cfg = TtsConfig(engine="piper")
    assert TtsHost(cfg, tmp_path, cpus=(0,)).readers == 1  # sized by `--cpus`
    host = TtsHost(cfg, tmp_path, cpus=(0,)).start()
    try:
        own = build_tts(cfg, threads=1)
        own.setup()
        alone = [own.synthesize(line, "en") for line in LINES]
        workers = [RemoteTts(host.address), RemoteTts(host.address)]
        with ThreadPoolExecutor(len(LINES)) as pool:  # clauses of both workers at once
            shared = list(pool.map(lambda i: workers[i % 2].synthesize(LINES[i], "en"),
                                   range(len(LINES))))
        for (pcm, rate, engine, note), (pcm0, rate0, engine0, _) in zip(shared, alone,
                                                                         strict=True):
            assert (rate, engine, note) == (rate0, engine0, "")
            # the same clause's speech (piper draws its durations: not sample for sample)
            assert 0.8 < len(pcm) / len(pcm0) < 1.25 and rms_dbfs(pcm) > -35
        # a language piper has no voice for: read by it all the same, and the turn says so
        _, _, engine, note = workers[0].synthesize("你好", "zh")
        assert engine == "piper" and note == "no zh voice: read by piper"
        # the voice's own failure: the worker's turn gets it as the voice's TtsError; an
        # offline voice is not taken for down, so the next clause, any worker's, is read
        with pytest.raises(TtsError, match="piper produced no audio"):
            workers[1].synthesize("...", "en")
        assert workers[0].synthesize(LINES[0], "en")[2] == "piper"
    finally:
        host.stop()
    with pytest.raises(TtsError, match="went away|does not answer"):  # the parent is gone
        RemoteTts(host.address).synthesize(LINES[0], "en")
