"""Regenerate the test recordings in this folder with the offline voices (piper for English,
Kokoro for Mandarin).

  .venv/bin/python -m assets.make_assets

Writes 16 kHz mono WAVs (and one 48 kHz stereo copy) plus transcripts.json. A short
silence pads each clip, as a person leaves before and after speaking.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).parent
CLIPS = {
    "en_capital.wav": "What is the capital of France?",
    "en_joke.wav": "Tell me a short joke about cats.",
    "en_weather.wav": "How do I stay warm in winter?",
    "en_hello.wav": "Hello, who are you?",
}
ZH_CLIPS = {
    "zh_weather.wav": "今天天气怎么样？",
    "zh_intro.wav": "你好，请介绍一下你自己。",
    "zh_music.wav": "我想听一首轻松的音乐。",
}


def main() -> None:
    from app.stages.audio import resample
    from app.stages.tts.kokoro import KokoroTts
    from app.stages.tts.piper import PiperTts

    voices = {"en": PiperTts(), "zh": KokoroTts()}
    for voice in voices.values():
        voice.setup()
    for name, text in {**CLIPS, **ZH_CLIPS}.items():
        pcm, rate = voices[name[:2]].synthesize(text, name[:2])
        x = resample(pcm.astype(np.float32) / 32768, rate, 16000)
        pad = np.zeros(int(0.4 * 16000), dtype=np.float32)
        sf.write(HERE / name, np.concatenate([pad, x, pad]), 16000, subtype="PCM_16")
    # the same first clip as a browser would upload it: 48 kHz stereo
    x, _ = sf.read(HERE / "en_capital.wav", dtype="float32")
    up = np.interp(np.arange(len(x) * 3) / 3, np.arange(len(x)), x)
    sf.write(HERE / "en_capital_48k_stereo.wav", np.stack([up, up * 0.8], axis=1), 48000,
             subtype="PCM_16")
    transcripts = dict(CLIPS, **ZH_CLIPS,
                       **{"en_capital_48k_stereo.wav": CLIPS["en_capital.wav"]})
    text = json.dumps(transcripts, indent=1, ensure_ascii=False)
    (HERE / "transcripts.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
