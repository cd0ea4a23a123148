"""What script a text is in: the one place the app tells CJK from Latin text."""

from __future__ import annotations


def is_cjk(ch: str) -> bool:
    """A CJK character (ideographs, radicals, kana, CJK and full-width punctuation): one
    spoken unit each, about as long to say as three Latin letters."""
    return "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef"


def has_cjk(text: str) -> bool:
    return any(is_cjk(ch) for ch in text)
