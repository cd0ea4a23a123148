"""Make the over-reply set in assets/over_set/: questions a user asks a voice assistant, to be
said over the agent's playing reply (issue 46; `python -m bench.over_reply`), in voices no
test or benchmark uses.

  .venv/bin/python -m assets.make_over_set            # writes the FLACs and labels.json
  .venv/bin/python -m assets.make_over_set --check    # transcribes them (tiny.en)

The questions are assets/over_sentences.tsv, one a line: weather, recipes, travel,
definitions, small talk, numbers; 4-14 words. The first ten are short, clear questions
(2-4 s of speech, each read right by tiny.en) for the page's scenario in
tests/test_turn_taking.py. Each clip is one finished question, 16 kHz mono FLAC, padded and
levelled as the labelled set's (assets.make_turn_set.write_clip: 0.4 s before the speech,
1.5 s after, peak 0.7); labels.json gives its voice, text and where its speech starts and
ends.

Voices: Kokoro reading espeak-ng's American English IPA (`kokoro-en`, see
assets.make_turn_set.english_ipa) at 0.8 of its pace (`KOKORO_EN_SPEED`: ~173 words a
minute, as espeak-ng's 160 in the other sets; at its own pace Kokoro says them at ~216),
each voice the style vectors of two of the package's Japanese speakers averaged: five pairs
that no test, set or benchmark uses (the app speaks Mandarin as jf_alpha; the labelled set
uses jf_gongitsune, jm_kumo and jf_nezumi alone, the Mandarin set jf_tebukuro and
jf_tebukuro+jm_kumo; English tests and benchmarks use piper and espeak-ng's en-us, en-us+m1,
+m3, +f1, +f3, +klatt, en-gb and en-gb-x-rp+m5). Tried on these 50 questions through the
demo's ASR (tiny.en, Whisper base telling the language), word error rate with the agent
silent:

| voice | WER, Kokoro's pace | WER, 0.8 of it | kept |
|---|---|---|---|
| kokoro-en:jm_kumo+jf_nezumi | 0.010 | 0.023 | yes |
| kokoro-en:jm_kumo+jf_gongitsune | 0.019 | 0.013 | yes |
| kokoro-en:jf_gongitsune+jf_nezumi | 0.022 | 0.005 | yes |
| kokoro-en:jf_tebukuro+jf_gongitsune | 0.026 | 0.005 | yes |
| kokoro-en:jf_tebukuro+jf_nezumi | 0.048 (no commas, no "?") | 0.010 | yes |
| espeak-ng en-us+m7, +m6, +m2 | 0.093, 0.116, 0.121 | | no |
| espeak-ng en-us+f2, +f5, +m4, en-us-nyc, en-gb-x-gbclan | 0.17-0.20 | | no |
| espeak-ng en-us+f4, en-gb-x-gbcwmd | 0.245, 0.323 | | no |
| espeak-ng en-gb-scotland, en-029 (the first 12 questions) | 0.311, 0.350 | | no |

Kokoro is far the clearer and the more natural: espeak-ng's regional voices lose whole
phrases ("How many ounces are in a pound?" -> "I'm in the code."), en-029 once came out in
Thai. The IPA goes to Kokoro with its clauses joined by commas and the question mark put
back: without them the first four pairs scored 0.011-0.021 at Kokoro's pace (as good), but
read every question flat. misaki's mapping of espeak's IPA to Kokoro's own phoneme set
(misaki.espeak, the fallback of its English G2P) scored worse: 0.022-0.036 for the first
three pairs, 0.031 read British. At Kokoro's pace a question lasted 1.0-4.1 s; at 0.8 it
lasts 1.3-5.1 s (the first ten 2.3-3.1 s). `--check` (tiny.en alone): 0.009 over the 50,
three questions misread, an accent's errors ("pack" heard as "park", "80" as "Aery",
"purrs" as "pose"; with other voices "cold" as "called"). Numbers are written as Whisper
writes them ("20%", "144"), so that a right reading scores no error.
"""

from __future__ import annotations

from pathlib import Path

from assets.make_turn_set import LEAD_S, Voices, lines, new_set, save_labels, set_main, write_clip

OUT = Path(__file__).parent / "over_set"
SENTENCES_FILE = Path(__file__).parent / "over_sentences.tsv"
VOICES = ["kokoro-en:jm_kumo+jf_nezumi", "kokoro-en:jm_kumo+jf_gongitsune",
          "kokoro-en:jf_gongitsune+jf_nezumi", "kokoro-en:jf_tebukuro+jf_gongitsune",
          "kokoro-en:jf_tebukuro+jf_nezumi"]
FIRST = 10
"""The first clips: short, clear questions for the page's scenario (`first` in labels)."""


def make_set() -> list[dict]:
    new_set(OUT)
    voices = Voices()
    texts = lines(SENTENCES_FILE)
    if len(set(texts)) != len(texts):
        raise SystemExit(f"{SENTENCES_FILE}: a question is there twice")
    labels = []
    for i, text in enumerate(texts):
        voice, name = VOICES[i % len(VOICES)], f"en_over_{i + 1:02d}.flac"
        speech = voices.speak(voice, text)
        row = {"file": name, "lang": "en", "voice": voice, "kind": "complete", "text": text,
               "first": i < FIRST, "speech_start_s": LEAD_S,
               "speech_end_s": write_clip(name, speech, OUT)}
        print(f"{name} {voice}: {text} ({row['speech_end_s'] - LEAD_S:.2f}s of speech)")
        labels.append(row)
    return save_labels(OUT, labels)


if __name__ == "__main__":
    set_main(__doc__, OUT, make_set, "tiny.en")
