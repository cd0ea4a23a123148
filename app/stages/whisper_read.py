"""Reading what Whisper gives: the language's odds and the decision among the agent's
languages, the closing marks' probability where it stopped, the last words' times, and the
signs of a loop (a phrase said again and again, text too repetitive to be speech)."""

from __future__ import annotations

import logging

import numpy as np

from app.language import CLOSERS, is_cjk, words

log = logging.getLogger("app.stages.asr")

MAX_COMPRESSION = 2.4
MAX_WORDS_PER_S = 5.0  # faster than anyone speaks, pauses and the clip's silence left in
# The detector's probability at or above which it is taken at its word for a language the
# agent does not speak (`AsrConfig.languages`). Short of that it decides among the agent's
# languages, by their probabilities' ratio: an English clip can get another language as its
# top one as surely as a Mandarin clip gets Mandarin, and how surely moves with the CPU's
# numerics, but between English and Mandarin the two clips' odds lie orders of magnitude
# apart (`python -m bench.wer.languages`, docs/PERFORMANCE.md).
CERTAIN_LANGUAGE = 0.95


def probabilities(whisper, encoded) -> dict[str, float]:
    """Whisper's language probabilities for one encoded window, highest first ({"en": p,
    "la": q, ...}; `whisper`: a ctranslate2.models.Whisper)."""
    return {tok[2:-2]: p for tok, p in whisper.detect_language(encoded)[0]}  # "<|zh|>"


def decide_language(probs: dict[str, float], languages: tuple[str, ...]) -> str:
    """The detector's top language where it is certain of it; else the most probable of
    `languages` (English where the detector gave none of them any probability)."""
    top = max(probs, key=probs.get)
    if probs[top] >= CERTAIN_LANGUAGE:
        return top
    ours = max(languages, key=lambda lang: probs.get(lang, 0.0))
    if top != ours:
        log.info("language: %s %.2f, taken as %s (%.3f against %s)", top, probs[top], ours,
                 probs.get(ours, 0.0), ", ".join(f"{lang} {probs.get(lang, 0.0):.3f}"
                                                 for lang in languages if lang != ours))
    return ours


def closing_marks(tok) -> list[int]:
    """The token ids of the closing marks that are one token each: ".", "?" and "!", and
    in a multilingual vocabulary "。", "？" and "！" (faster-whisper `Tokenizer`)."""
    ids = [tok.encode(mark) for mark in CLOSERS]
    return [i[0] for i in ids if len(i) == 1]


def close_probability(result, ids: list[int], marks: list[int]) -> float | None:
    """Where `ids` (the decoded tokens, or the first copy of a loop's) end with no closing
    mark: the probability the decoder gave one of `marks` at the next step, where it chose
    the end, or the loop's next copy, instead (from the step's log-probabilities,
    `return_logits_vocab`). None where they close with a mark, or the step is not there.
    Low at most pauses inside a sentence (on the labelled set and in the page); higher for
    finished sentences left unclosed, but also for some halves cut at a short gap ("Why is
    the sky"): docs/PERFORMANCE.md."""
    if not ids or ids[-1] in marks or not result.logits or len(result.logits[0]) <= len(ids):
        return None
    import ctranslate2

    step = result.logits[0][len(ids)]
    if step.device != "cpu":
        step = step.to_device(ctranslate2.Device.cpu)
    x = np.asarray(step, dtype=np.float64).ravel()
    p = np.exp(x - x.max())
    return float(p[marks].sum() / p.sum())


def last_words(model, tok, encoded, sequences: list[list[int]],
               lengths: list[float]) -> list[tuple[float, float] | None]:
    """Where each sequence's last word (`app.language.words`: punctuation is none) lies in
    its audio, (start, end) in seconds, by faster-whisper's alignment of the tokens to the
    audio through the decoder's cross-attention (`WhisperModel.find_alignment`, cheap for a
    short turn). None for a sequence without words."""
    if not all(sequences):  # the batch's one alignment needs tokens in each
        return [None] * len(sequences)
    # each window's own audio (CTranslate2's `align` takes a count per window)
    aligned = model.find_alignment(tok, [list(s) for s in sequences], encoded,
                                   [max(1, int(s * 100)) for s in lengths])
    out: list[tuple[float, float] | None] = []
    for found in aligned:
        last = next((w for w in reversed(found) if words(w["word"])), None)
        out.append(None if last is None else (float(last["start"]), float(last["end"])))
    return out


def window_mel(fe, audio: np.ndarray, frames: int) -> np.ndarray:
    """Whisper's log-mel features of `audio` padded with silence to `frames` frames, as
    faster-whisper's extractor gives them for its full window of padding (equal to 1e-7), at
    the cost of the audio alone: for a short clip the STFT of the padding is most of the
    extractor's time. A frame of padded zeros is the floor the extractor clamps to:
    8 (in log10 units, 2 after its scaling) under the loudest frame, at most that of a zero,
    (log10(1e-10) + 4) / 4."""
    mel = fe(audio, padding=fe.n_fft)[:, :frames]  # one FFT of zeros: the last frames exact
    if mel.shape[1] < frames:
        floor = max(-1.5, float(mel.max()) - 2.0)
        mel = np.concatenate([mel, np.full((mel.shape[0], frames - mel.shape[1]), floor,
                                           mel.dtype)], axis=1)
    return mel


def repeated(text: str) -> bool:
    """Whether `text` is one phrase of two or more words written twice or more over, the
    last copy perhaps cut short, inside a word too ("Hello? Who are you? Hello? Who are
    you? Hello?", "... about dairlfriends Tell me something about dairlfriend": a loop
    stopped by the length cap), or ends in a loop (`tail_loop`)."""
    w = words(text)
    return loop_period(w) is not None or tail_loop(w)


def tail_loop(w: list[str]) -> bool:
    """Whether `w` ends in a phrase of one to three words written over and over after other
    words, one word four times or more, a longer phrase three ("What does a civil... What?
    What? What? What?": tiny.en over a reply). CJK characters are words of their own, and
    "哈哈哈哈" is said: they are left out."""
    for period, copies in ((1, 4), (2, 3), (3, 3)):
        n = period * copies
        tail = w[-n:]
        if len(w) > n and all(tail[i] == tail[i % period] for i in range(n)) \
                and not any(is_cjk(ch) for word in tail for ch in word):
            return True
    return False


def loop_period(w: list[str]) -> int | None:
    """How many words the phrase `repeated` finds written over and over in `w` is long
    (the shortest such phrase), or None. Written again at least whole, or in its first
    three words or more ("Reminds me to call my sister this weekend. Reminds me to call my
    sister", tiny.en in the page for a short clip)."""
    return next((period for period in range(2, len(w) - 1)
                 if len(w) - period >= min(period, 3)
                 and all(w[i] == w[i % period] for i in range(len(w) - 1))
                 and w[-1] and w[len(w) - 1 - period].startswith(w[-1])), None)


def first_copy(text: str, seconds: float) -> str | None:
    """The phrase a looping transcript writes over and over, as first written ("Tell me a
    joke" for "Tell me a joke Tell me a joke Tell me a joke Tell me" heard in little more
    than a second), where no one could have said all of `text` in `seconds` (more than
    `MAX_WORDS_PER_S`) but could have said that phrase; else None (and where its words do
    not map one to one onto its spaces: Mandarin).

    Whisper in a window shorter than its full one often writes the words said, then the same
    again and again, the more often the shorter the window (docs/PERFORMANCE.md). A phrase
    really said twice fits its time and is left whole (and read again in a longer
    window)."""
    w = words(text)
    tokens = text.split()
    if len(tokens) != len(w) or len(w) <= MAX_WORDS_PER_S * seconds:
        return None
    period = loop_period(w)
    if period is None or period > MAX_WORDS_PER_S * seconds:
        return None
    return " ".join(tokens[:period])


def compression_ratio(text: str) -> float:
    """Whisper's repetition check: a looping transcript compresses far better than speech."""
    import zlib

    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0
