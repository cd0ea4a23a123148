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

import argparse
import json
from pathlib import Path

import numpy as np

from assets.make_turn_set import LEAD_S, RATE, Voices, check, pause_clip, write_clip

OUT = Path(__file__).parent / "zh_set"
SENTENCES_FILE = Path(__file__).parent / "zh_sentences.tsv"
VOICES = ["kokoro:jf_tebukuro", "kokoro:jf_tebukuro+jm_kumo"]
PAUSE_MS = (600, 900)
SEED = 11


def sentences() -> list[str]:
    """The sentences; "|" marks where a pause clip stops for a while."""
    return [line.strip() for line in SENTENCES_FILE.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


def make_set() -> list[dict]:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.flac"):  # a clip from a longer list of sentences must not linger
        old.unlink()
    voices = Voices()
    texts = sentences()
    n_pauses = sum("|" in text for text in texts)
    # evenly over the range, in a seeded order
    lengths = iter(np.random.default_rng(SEED).permutation(
        np.linspace(*PAUSE_MS, n_pauses).round().astype(int)).tolist())
    labels, counts = [], {}
    for text in texts:
        kind = "pause" if "|" in text else "complete"
        i = counts[kind] = counts.get(kind, 0) + 1
        voice, name = VOICES[(i - 1) % len(VOICES)], f"zh_{kind}_{i:02d}.flac"
        print(f"{name} {voice}: {text}")
        row = {"file": name, "lang": "zh", "voice": voice, "kind": kind, "text": text,
               "prefix": None, "pause_at_s": None, "pause_ms": None}
        if kind == "pause":
            pause_ms = next(lengths)
            speech, prefix, sentence, cut = pause_clip(voices, voice, "zh", text, pause_ms)
            row.update(text=sentence, prefix=prefix, pause_ms=pause_ms,
                       pause_at_s=round(LEAD_S + cut / RATE, 3))
        else:
            speech = voices.speak(voice, text)
        row["speech_end_s"] = write_clip(name, speech, OUT)
        print(f"  {len(speech) / RATE:.2f}s of speech, ends at {row['speech_end_s']}s")
        labels.append(row)
    (OUT / "labels.json").write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    return labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="transcribe the clips in assets/zh_set with Whisper base, without "
                        "making them again, and print each one's character error rate")
    args = p.parse_args()
    if args.check:
        check(json.loads((OUT / "labels.json").read_text(encoding="utf-8")), OUT)
    else:
        make_set()


if __name__ == "__main__":
    main()
