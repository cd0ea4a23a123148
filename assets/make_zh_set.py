"""Make the Mandarin clip set in assets/zh_set/: things a user says to a voice assistant, for
measuring ASR character error rate and end of turn, in voices no test or benchmark uses.

  .venv/bin/python -m assets.make_zh_set            # writes the FLACs and labels.json
  .venv/bin/python -m assets.make_zh_set --check    # then transcribes each clip (ASR)

The sentences are assets/zh_sentences.tsv, one a line. Half are pause clips: "|" marks a
point where the words before it are plainly unfinished (a clause and its conjunction, 我想,
帮我, 能不能, a measure word, a verb before its object), and the clip stops there for 600-900
ms. They are made as assets.make_turn_set makes its own (one synthesis of the whole sentence,
cut at the word boundary that dynamic time warping finds) and labelled with the same keys;
the clips are 16 kHz mono FLAC, to keep the repository small.

Voices: Kokoro's jf_tebukuro (the one Japanese speaker in its package that neither the app,
jf_alpha, nor the turn set uses) and jf_tebukuro's style averaged with jm_kumo's, a lower
voice that is neither speaker. No sentence has "谢谢", which Whisper hears from jf_tebukuro
as "shayshia". espeak-ng's Mandarin is left out: its "cmn" voice (1.51, as Debian ships it)
reads the pinyin its dictionary gives with English rules and tone digits ("nee three"), and
"cmn-latn-pinyin", which reads it as pinyin, in the variants m1, m3, f1 and f4, came
through Whisper base at a character error rate of 0.5-0.8 on most of five trial sentences.
"""

from __future__ import annotations

from pathlib import Path

from assets.make_turn_set import (
    Voices,
    clip_row,
    lines,
    new_set,
    pause_lengths,
    save_labels,
    set_main,
)

OUT = Path(__file__).parent / "zh_set"
SENTENCES_FILE = Path(__file__).parent / "zh_sentences.tsv"
VOICES = ["kokoro:jf_tebukuro", "kokoro:jf_tebukuro+jm_kumo"]
SEED = 11


def make_set() -> list[dict]:
    new_set(OUT)
    voices = Voices()
    texts = lines(SENTENCES_FILE)
    lengths = pause_lengths(texts, SEED)
    labels, counts = [], {}
    for text in texts:
        kind = "pause" if "|" in text else "complete"
        i = counts[kind] = counts.get(kind, 0) + 1
        voice, name = VOICES[(i - 1) % len(VOICES)], f"zh_{kind}_{i:02d}.flac"
        labels.append(clip_row(voices, voice, "zh", text, name, lengths, OUT))
    return save_labels(OUT, labels)


if __name__ == "__main__":
    set_main(__doc__, OUT, make_set, "Whisper base")
