"""Cut a streamed reply into speakable pieces while the model is still generating.

What a listener hears first decides the turn's latency, so the first piece is short: it
ends at a clause break (a comma) or a sentence end, or after the first few words when
neither comes soon. Later pieces end at sentence breaks (`.!?` followed by a space in
English, `。！？；` in Mandarin, or a newline); a long sentence is cut into phrases at a
clause break, or at a word boundary. The phrases grow (`growth`): each may be half as
long again as the one before, up to `phrase_max_words`, so the next piece is decoded and
synthesised while the one before plays. A piece is decoded and then synthesised before
it can play, so where both together take about as long as speaking it (the 2-core CPU
demo), a phrase much longer than the one before leaves the reply silent between them
(docs/PERFORMANCE.md, "Silence inside the reply").

A full stop ends a sentence unless it closes a real abbreviation ("Mr.", "e.g.", "a.m.", a
single initial), sits inside a number ("3.5" has no space after the dot) or numbers a list
item ("1. Drink water", at a line's start or after a colon or a sentence): "Nice to meet
you." and "It is 42." end sentences. The reply budget (app/stages/budget.py) counts sentences by
the same rule (`english_end`).
"""

from __future__ import annotations

import re

from app.language import is_cjk

ZH_END = "。！？；…"
EN_END = ".!?"
_CLAUSE = ",，、:：;"
_CLOSERS = "\"'”’）)」』"
# Words that a full stop follows without ending the sentence (lower case, without the dot).
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs",
                           "approx", "dept", "fig", "gen", "gov", "sgt", "capt", "lt"})
_DOTTED = re.compile(r"(?:[a-z]\.)+[a-z]")  # e.g, i.e, a.m, u.s (the last dot is the cut)
# A list item's number: at the start, after a line break, a colon or a sentence's end.
_LIST_NUMBER = re.compile(r"(?:^|[\n:：.!?。！？]\s*)\d{1,2}\.$")


class SentenceChunker:
    """Feed text deltas with `push`; get back complete pieces; `flush` at the end.

    first_max_words: the first piece ends after this many words when no clause or
    sentence break came sooner. Later pieces are cut after `first_max_words` x
    `growth` ** k words (piece k, from 0), at most `phrase_max_words` (at the last clause
    break inside them, else at a word boundary). The app passes `--first-piece-words`
    (`TtsConfig.first_piece_words`).
    """

    def __init__(self, first_max_words: int = 3, phrase_max_words: int = 14,
                 first_clause_min_chars: int = 8, min_chars: int = 2,
                 first_max_width: int = 36, growth: float = 1.5) -> None:
        self.first_max_words = first_max_words
        self.phrase_max_words = phrase_max_words
        self.growth = growth
        self.first_clause_min_chars = first_clause_min_chars
        self.min_chars = min_chars
        self.first_max_width = first_max_width
        """Mandarin has no spaces: the first piece ends after this many characters' width."""
        self._buf = ""
        self._emitted = 0

    def push(self, delta: str) -> list[str]:
        self._buf += delta
        pieces = []
        while (cut := self._find_cut()) is not None:
            piece, self._buf = self._buf[:cut].strip(), self._buf[cut:].lstrip()
            if piece:
                pieces.append(piece)
                self._emitted += 1
        return pieces

    def flush(self) -> list[str]:
        piece, self._buf = self._buf.strip(), ""
        if piece:
            self._emitted += 1
            return [piece]
        return []

    def _find_cut(self) -> int | None:
        buf = self._buf
        first = self._emitted == 0
        most = min(self.phrase_max_words,
                   round(self.first_max_words * self.growth ** self._emitted))
        clause_cut = None  # the last clause break seen in a long sentence
        words = 0
        for i, ch in enumerate(buf):
            if ch == "\n" and buf[:i].strip():
                return i + 1
            if ch in ZH_END:
                end = self._skip_closers(i + 1)
                if len(buf[:end].strip()) >= self.min_chars or ch in "。！？":
                    return end
            elif ch in EN_END:
                end = english_end(buf, i)
                if end is not None and len(buf[:end].strip()) >= self.min_chars:
                    return end
            elif ch in _CLAUSE:
                end = i + 1
                if end >= len(buf) or (ch in ",:;" and not buf[end].isspace()):
                    continue  # "1,000" or "12:30", or the next character is still to come
                if first and _width(buf[:end].strip()) >= self.first_clause_min_chars:
                    return end
                clause_cut = end
            elif ch.isspace() and i > 0 and not buf[i - 1].isspace():
                words += 1
                if first and words >= self.first_max_words:
                    return i
                if not first and words >= most:
                    return clause_cut or i
            elif first and _width(buf[:i + 1]) >= self.first_max_width and is_cjk(ch) \
                    and not _is_last(buf, i):
                # Mandarin: no spaces, so the first piece is cut by width at a character
                return i + 1
        return None

    def _skip_closers(self, pos: int) -> int:
        return skip_closers(self._buf, pos)


def skip_closers(text: str, pos: int) -> int:
    """The position after the closing quotes and brackets that start at `pos`."""
    while pos < len(text) and text[pos] in _CLOSERS:
        pos += 1
    return pos


def english_end(text: str, i: int) -> int | None:
    """Where the sentence that the mark `text[i]` (one of `.!?`) ends stops, after its
    closing quotes; None where it ends none, or none yet: no whitespace after it so far
    ("3.5", "a.m." may go on), an abbreviation, or a list item's number."""
    end = skip_closers(text, i + 1)
    if end >= len(text) or not text[end].isspace():
        return None
    head = text[:end].strip()
    if text[i] == "." and (is_abbreviation(head) or bool(_LIST_NUMBER.search(head))):
        return None
    return end


def is_abbreviation(head: str) -> bool:
    """Whether the full stop at the end of `head` closes an abbreviation or an initial."""
    word = head.rsplit(None, 1)[-1][:-1].lstrip("\"'(“‘")
    if len(word) == 1 and word.isupper():
        return True  # an initial: "J. K. Rowling"
    low = word.lower()
    return low in ABBREVIATIONS or bool(_DOTTED.fullmatch(low))


def _is_last(buf: str, i: int) -> bool:
    """Never cut at the text's last character so far: more of its word may follow."""
    return i == len(buf) - 1


def _width(text: str) -> int:
    """Length in Latin-letter equivalents: a CJK character takes about as long to say as
    three letters of English."""
    return sum(3 if is_cjk(ch) else 1 for ch in text)


def split_all(text: str, **kwargs: float) -> list[str]:
    """Chunk a whole text at once (what the streaming path produces for the same text)."""
    chunker = SentenceChunker(**kwargs)
    return chunker.push(text) + chunker.flush()
