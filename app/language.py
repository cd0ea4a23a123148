"""What script a text is in: the one place the app tells CJK from Latin text."""

from __future__ import annotations

import re
from functools import cache

LATIN_CLOSERS = (".", "?", "!")
"""The marks that close a sentence in Latin script (the English-only Whisper writes no other)."""
CLOSERS = LATIN_CLOSERS + ("。", "？", "！")
"""The marks a finished sentence may end with, Latin and CJK."""


def is_cjk(ch: str) -> bool:
    """A CJK character (ideographs, radicals, kana, CJK and full-width punctuation): one
    spoken unit each, about as long to say as three Latin letters."""
    return "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef"


def has_cjk(text: str) -> bool:
    return any(is_cjk(ch) for ch in text)


def words(text: str) -> list[str]:
    """Lower-case words; each CJK character counts as a word."""
    out: list[str] = []
    for token in re.findall(r"[\w'-]+", text.lower()):
        if any(is_cjk(c) for c in token):
            out += [c for c in token if is_cjk(c)]
        else:
            out.append(token.strip("'-"))
    return [w for w in out if w]


@cache
def _t2s():  # opencc.OpenCC: its dictionaries load once, on the first Mandarin transcript
    import opencc

    return opencc.OpenCC("t2s")


def simplified(text: str) -> str:
    """Mandarin written in simplified characters, whatever Whisper wrote: it writes
    traditional ones for some speakers and phrases, even when prompted for simplified."""
    return _t2s().convert(text) if has_cjk(text) else text
