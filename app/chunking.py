"""Cut a streamed reply into speakable pieces while the model is still generating.

The first piece may end at a clause break (a comma) so that the first audio starts early;
later pieces end at sentence breaks: `.!?` followed by a space in English, `。！？；` in
Mandarin, or a newline.
"""

from __future__ import annotations

import re

_ZH_END = "。！？；…"
_EN_END = ".!?"
_CLAUSE = ",，、:：;"
_CLOSERS = "\"'”’）)」』"
# "e.g. " or "Dr. " must not end a sentence: a word of 1-3 letters before the dot.
_ABBREV = re.compile(r"(?:\b[A-Za-z]{1,3}|\d)\.$")
_KNOWN_ENDS = {"yes.", "no.", "ok.", "hi.", "bye.", "yes!", "no!", "hi!", "ok!"}


class SentenceChunker:
    """Feed text deltas with `push`; get back complete pieces; `flush` at the end."""

    def __init__(self, first_clause_min_chars: int = 24, min_chars: int = 4) -> None:
        self.first_clause_min_chars = first_clause_min_chars
        self.min_chars = min_chars
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
        for i, ch in enumerate(buf):
            if ch == "\n" and buf[:i].strip():
                return i + 1
            if ch in _ZH_END:
                end = self._skip_closers(i + 1)
                if len(buf[:end].strip()) >= self.min_chars or ch in "。！？":
                    return end
            elif ch in _EN_END:
                end = self._skip_closers(i + 1)
                # an English sentence ends only where whitespace follows (else: "3.5", "a.m")
                if end >= len(buf) or not buf[end].isspace():
                    continue
                head = buf[:end].strip()
                if ch == "." and _ABBREV.search(head) and head.lower() not in _KNOWN_ENDS:
                    continue
                if len(head) >= self.min_chars:
                    return end
            elif ch in _CLAUSE and self._emitted == 0:
                end = i + 1
                if end < len(buf) and _width(buf[:end].strip()) >= self.first_clause_min_chars:
                    if ch in ",:;" and not buf[end].isspace():
                        continue  # "1,000" or "12:30"
                    return end
        return None

    def _skip_closers(self, pos: int) -> int:
        while pos < len(self._buf) and self._buf[pos] in _CLOSERS:
            pos += 1
        return pos


def _width(text: str) -> int:
    """Length in Latin-letter equivalents: a CJK character takes about as long to say as
    three letters of English."""
    return sum(3 if ord(ch) >= 0x2E80 else 1 for ch in text)


def split_all(text: str, first_clause_min_chars: int = 24) -> list[str]:
    """Chunk a whole text at once (what the streaming path produces for the same text)."""
    chunker = SentenceChunker(first_clause_min_chars=first_clause_min_chars)
    return chunker.push(text) + chunker.flush()
