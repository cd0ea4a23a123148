"""Is the speech heard while the agent talks an interruption? Decided by its words.

Speech over the agent's reply is one of: the user interrupting ("wait, stop"), a
backchannel ("mhm", "yeah"), a cough or a laugh (no words), or the agent's own voice
coming back through the speakers where the browser's echo canceller let it through. Only
the first may cut the reply. The words come from the same ASR as the turns, on the first
`barge_in_ms` of the speech.
"""

from __future__ import annotations

import re

# Words that acknowledge without taking the turn (lower case, punctuation stripped).
BACKCHANNELS = frozenset({
    "mhm", "mm", "mmm", "hmm", "hm", "uh", "um", "huh", "uhhuh", "uh-huh", "yeah", "yes",
    "yep", "ok", "okay", "right", "sure", "aha", "ah", "oh", "i", "see", "alright",
    "嗯", "对", "好", "是", "哦", "啊", "嗯嗯", "对对",
})


def words(text: str) -> list[str]:
    """Lower-case words; each CJK character counts as a word."""
    out: list[str] = []
    for token in re.findall(r"[\w'-]+", text.lower()):
        if any("\u4e00" <= c <= "\u9fff" for c in token):
            out += [c for c in token if "\u4e00" <= c <= "\u9fff"]
        else:
            out.append(token.strip("'-"))
    return [w for w in out if w]


MIN_SCORE = -1.2
"""Below this mean token log-probability the words are a guess: no words. Measured in the
browser tests: interruptions -0.36 to -1.07 (half a second of speech is hard to read),
Whisper's guesses at a hum ("Mhm." heard as "and may Chen") -1.30 to -1.63."""
HUM = frozenset("mhnu")  # "Mhm" comes back as "M.H.N.", "M.H.M.H.", "Hmm"


def verdict(heard: str, agent_text: str, score: float = 0.0) -> str:
    """"interrupt", "echo" (the agent's own words), "backchannel" or "noise" (no words)."""
    from app.asr import MAX_COMPRESSION, compression_ratio

    w = words(heard)
    if not w or score < MIN_SCORE or compression_ratio(heard) > MAX_COMPRESSION or loops(w):
        return "noise"  # nothing, a guess, or Whisper looping ("Stay warm. Stay warm. ...")
    letters = "".join(w)
    if all(x in BACKCHANNELS for x in w) or len(letters) <= 3 or set(letters) <= HUM:
        return "backchannel"
    if echo_similarity(letters, "".join(words(agent_text))) >= ECHO_SIMILARITY:
        return "echo"
    return "interrupt"


def loops(w: list[str]) -> bool:
    """A phrase of two or three words said three times or more: Whisper looping on a
    sound it cannot read (a short text escapes the compression check)."""
    from collections import Counter

    for n in (2, 3):
        grams = Counter(tuple(w[i:i + n]) for i in range(len(w) - n + 1))
        if grams and max(grams.values()) >= 3:
            return True
    return False


ECHO_SIMILARITY = 0.7
"""Echo: the heard letters match a stretch of the agent's letters this well (1 - edits /
length). A half-second window cuts words and ASR bends them ("Stay warm" heard as "Say
warm", "staying warm" as "stay in warm"), so letters are compared, not words."""


def echo_similarity(heard: str, spoken: str) -> float:
    """1 - (edits to turn `heard` into the best-matching stretch of `spoken`) / len(heard):
    semi-global edit distance, free to start and end anywhere in `spoken`."""
    if not heard or not spoken:
        return 0.0
    prev = [0] * (len(spoken) + 1)  # a match may start anywhere: row 0 costs nothing
    for i, h in enumerate(heard, start=1):
        cur = [i] + [0] * len(spoken)
        for j, c in enumerate(spoken, start=1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (h != c))
        prev = cur
    return 1.0 - min(prev) / len(heard)
