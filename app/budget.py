"""The spoken-reply budget: a voice reply ends after a few sentences.

A listener cannot skim. The product's replies are a sentence or two, and a reply that runs
on keeps the agent talking while the user wants the floor back, so most questions are then
spoken over it. The budget counts the sentence ends the chunker cuts at (`。！？；…` in
Mandarin, `.!?` followed by a space in English, not after an abbreviation, inside a number
or after a list item's number); once the reply has said its last allowed sentence, the rest
of the stream is cut off, the request is closed (so the server stops generating it), and
only what was kept goes into the history.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from app.chunking import EN_END, ZH_END, english_end, skip_closers
from app.messages import ReplyDelta


class ReplyBudget:
    """Feed the reply's text as it streams; `push` returns the part within the budget.

    sentences: how many sentences the reply may say (0: no limit). Once `over` is set, the
    text after the last allowed sentence end has been dropped and every later push returns
    nothing.
    """

    def __init__(self, sentences: int) -> None:
        self.sentences = sentences
        self.done = 0
        """Sentences completed so far."""
        self.over = False
        """The budget is spent: the caller stops the stream."""
        self._text = ""
        self._checked = 0  # where the scan for sentence ends resumes in `_text`

    def push(self, text: str) -> str:
        if self.over:
            return ""
        if self.sentences <= 0:
            return text
        start = len(self._text)
        self._text += text
        cut = self._scan()
        if cut is None:
            return text
        self.over = True
        kept = max(0, cut - start)
        return text[:kept]

    def _scan(self) -> int | None:
        """The end of the last allowed sentence in the text so far, once it is certain:
        a run of Mandarin end marks and closing quotes with more text after it, or an
        English end as the chunker cuts it (`english_end`)."""
        buf, i = self._text, self._checked
        while i < len(buf):
            if buf[i] in ZH_END:
                end = i
                while end < len(buf) and buf[end] in ZH_END + EN_END:
                    end += 1
                end = skip_closers(buf, end)
                if end >= len(buf):
                    break  # the run may go on
            elif buf[i] in EN_END:
                end = english_end(buf, i)
                if end is None:
                    if skip_closers(buf, i + 1) >= len(buf):
                        break  # what follows the mark decides, and it has not come yet
                    i += 1
                    continue
            else:
                i += 1
                continue
            if buf[:end].strip():
                self.done += 1
                if self.done >= self.sentences:
                    return end
            i = end
        self._checked = i
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
