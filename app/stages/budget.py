"""The spoken-reply budget: a voice reply ends after a few sentences, or (`seconds`) once it
takes too long to say.

A listener cannot skim. The product's replies are a sentence or two, and a reply that runs
on keeps the agent talking while the user wants the floor back, so most questions are then
spoken over it. The budget counts the sentence ends the chunker cuts at (`。！？；…` in
Mandarin, `.!?` followed by a space in English, not after an abbreviation, inside a number
or after a list item's number); once the reply has said its last allowed sentence, the rest
of the stream is cut off, the request is closed (so the server stops generating it), and
only what was kept goes into the history.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

from app.language import is_cjk
from app.messages import ReplyDelta
from app.stages.chunking import EN_END, ZH_END, english_end, skip_closers

# How long a reply takes to say, from its text: English words and Mandarin characters a
# second at the pace of the app's voices; a number is said as about a word a digit.
WORDS_PER_S = 2.5
CHARS_PER_S = 4.5
GRACE_S = 1.5
"""A reply past its time that reaches no clause break within this long more ends at a word."""
_WORD = re.compile(r"[^\W_](?:[\w'’-]*[^\W_])?")
_CLAUSE_ZH = "，、：；"
_CLAUSE_EN = ",;:"


class ReplyBudget:
    """Feed the reply's text as it streams; `push` returns the part within the budget.

    sentences: how many sentences the reply may say (0: no limit). seconds: how long it may
    take to say, from its words (0: no limit); a reply past it ends at its next clause or
    sentence break, or at a word once `GRACE_S` more has gone by with none. Once `over` is
    set, the text after the cut has been dropped and every later push returns nothing.
    """

    def __init__(self, sentences: int, seconds: float = 0.0) -> None:
        self.sentences, self.seconds = sentences, seconds
        self.done = 0
        """Sentences completed so far."""
        self.over = False
        """The budget is spent: the caller stops the stream."""
        self._text = ""
        self._checked = 0  # where the scan for sentence ends resumes in `_text`

    def push(self, text: str) -> str:
        if self.over:
            return ""
        if self.sentences <= 0 and self.seconds <= 0:
            return text
        start = len(self._text)
        self._text += text
        cuts = [c for c in (self._scan() if self.sentences > 0 else None,
                            self._past_time() if self.seconds > 0 else None) if c is not None]
        cut = min(cuts, default=None)  # whichever rule ends the reply first
        if cut is None:
            return text
        self.over = True
        kept = max(0, cut - start)
        return text[:kept]

    def _scan(self) -> int | None:
        """The end of the last allowed sentence in the text so far, once it is certain
        (`sentence_end`)."""
        buf, i = self._text, self._checked
        while i < len(buf):
            end = sentence_end(buf, i)
            if end is None:
                if buf[i] in ZH_END + EN_END and _run_end(buf, i) >= len(buf):
                    break  # what follows the mark decides, and it has not come yet
                i += 1
                continue
            if buf[:end].strip():
                self.done += 1
                if self.done >= self.sentences:
                    return end
            i = end
        self._checked = i
        return None

    def _past_time(self) -> int | None:
        """Where a reply that takes too long to say ends, once that is certain: at a sentence
        end once half its time has gone by (a sentence that long is a reply), at a clause
        break once all of it has, or at the end of the word that runs `GRACE_S` past it."""
        buf = self._text
        half = time_point(buf, self.seconds / 2)
        if half is None:
            return None
        past = time_point(buf, self.seconds)
        for i in range(half, len(buf)):
            ch = buf[i]
            if (end := sentence_end(buf, i)) is not None:
                return end
            if past is not None and i >= past and (
                    ch in _CLAUSE_ZH or ch in _CLAUSE_EN and buf[i + 1:i + 2].isspace()):
                return i + 1
        late = time_point(buf, self.seconds + GRACE_S)
        return late if late is not None and late < len(buf) else None


def _run_end(text: str, i: int) -> int:
    """The position after the run of end marks at `i` and the closing quotes after it."""
    end = i
    while end < len(text) and text[end] in ZH_END + EN_END:
        end += 1
    return skip_closers(text, end)


def sentence_end(text: str, i: int) -> int | None:
    """Where the sentence whose end mark is `text[i]` ends, once that is certain: after the
    run of Mandarin marks and closing quotes with more text after it, or an English end as
    the chunker cuts it (`english_end`); None where `text[i]` ends none, or none yet."""
    if text[i] in ZH_END:
        end = _run_end(text, i)
        return end if end < len(text) else None
    return english_end(text, i) if text[i] in EN_END else None


def time_point(text: str, seconds: float) -> int | None:
    """The end of the word (or Mandarin character) of `text` at which saying it takes
    `seconds`; None if all of it takes less."""
    said = 0.0
    for m in _WORD.finditer(text):
        word = m.group()
        if not is_cjk(word[0]):
            said += max(1, sum(ch.isdigit() for ch in word)) / WORDS_PER_S
            if said >= seconds:
                return m.end()
            continue
        for k, ch in enumerate(word):
            said += 1 / CHARS_PER_S if is_cjk(ch) else 0.0
            if said >= seconds:
                return m.start() + k + 1
    return None


def sentences(text: str) -> int:
    """How many sentences a whole text says, counted as the budget counts them."""
    budget = ReplyBudget(len(text) + 1)
    budget.push(text + "\n")  # the text is over: its last mark ends a sentence
    return budget.done


def within(deltas: Iterator[ReplyDelta], budget: ReplyBudget) -> Iterator[ReplyDelta]:
    """The stream's deltas cut at the budget. Once it is spent the model's stream is closed,
    which ends the request on the server, so the rest of the reply is never generated."""
    try:
        for delta in deltas:
            kept = budget.push(delta.text)
            if kept:
                yield delta if kept == delta.text else replace(delta, text=kept)
            if budget.over:
                return
    finally:
        close = getattr(deltas, "close", None)  # a generator: closing it closes its request
        if close is not None:
            close()
