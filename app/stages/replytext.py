"""What the agent's voice reads besides the model's words, and how the model's words are
trimmed for it: the notice for speech in a language the model does not speak
(persona/notices.json), the stand-in replies of a dry run (persona/stand_in.txt), and the
persona's reply tag, kept in the text but never spoken."""

from __future__ import annotations

import json
from functools import cache

from app.paths import ROOT

NOTICES = ROOT / "persona" / "notices.json"
# the stand-in replies by language: English words apart by spaces; Mandarin in the model's
# tokens apart by spaces (Mandarin has none of its own), read out without them
STAND_IN = {"en": ROOT / "persona" / "stand_in.txt", "zh": ROOT / "persona" / "stand_in_zh.txt"}


@cache
def notices() -> dict:
    return json.loads(NOTICES.read_text(encoding="utf-8"))


def language_name(language: str) -> str:
    return notices()["names"].get(language, language)


def language_notice(language: str, spoken: tuple[str, ...]) -> str:
    """What the agent says to speech in a language its model does not speak: in English,
    and in the speaker's language too where the notice is written in it (it is spoken)."""
    n = notices()
    text = n["notice"].format(heard=language_name(language),
                              names=n["or"].join(language_name(x) for x in spoken))
    own = n["in_language"].get(language)
    if own is not None:
        text += " " + own["text"].format(langs=own["or"].join(own["names"].get(x, x)
                                                              for x in spoken))
    return text


@cache
def stand_in_replies(language: str = "en") -> tuple[str, ...]:
    """What `--tts-stand-in` speaks: replies of the kind a voice agent gives."""
    lines = STAND_IN[language].read_text(encoding="utf-8").splitlines()
    return tuple(line for line in lines if line.strip() and not line.startswith("#"))


class StandIn:
    """`--tts-stand-in` (a dry run: dummy weights stream random tokens): each delta of the
    model's stream becomes the next word (Mandarin: the next token) of a real reply, so the
    chunker cuts and the voice reads real text in the model's own timing: the first piece is
    as short as a real one ("Sure, here is", "明天上海多云，"), and TTS times what it would
    take on real words."""

    def __init__(self, turn_id: int, language: str = "en") -> None:
        """`language`: the turn's (heard, or `--language`); English where none is kept."""
        self.turn_id, self.words = turn_id, []
        self.language = language if language in STAND_IN else "en"
        self.gap = "" if self.language == "zh" else " "

    def push(self, text: str) -> str:
        if not text:
            return ""
        if not self.words:  # a reply longer than this one goes on with the next
            replies = stand_in_replies(self.language)
            reply = replies[self.turn_id % len(replies)]
            self.words, self.turn_id = reply.split(" "), self.turn_id + 1
        return self.words.pop(0) + self.gap


class TagStripper:
    """Drop the persona's reply tag ("小安：") from the start of the streamed reply: kept in the
    text (the harnesses check it), never spoken."""

    def __init__(self, tag: str) -> None:
        self.tag, self._lead, self._done = tag, "", not tag

    def push(self, text: str) -> str:
        if self._done:
            return text
        self._lead += text
        if self.tag.startswith(self._lead) and len(self._lead) <= len(self.tag):
            return ""  # still possibly the tag
        self._done = True
        lead = self._lead.lstrip()
        return lead[len(self.tag):].lstrip() if lead.startswith(self.tag) else self._lead

    def flush(self) -> str:
        if self._done:
            return ""
        self._done = True
        return "" if self._lead.strip() == self.tag else self._lead
