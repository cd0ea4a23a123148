"""Is the speech heard while the agent talks an interruption? Decided by its words and by
whether the user goes on talking once the agent has paused.

Speech over the agent's reply is one of: the user interrupting ("wait, stop", "what about
Spain?"), a backchannel ("mhm", "yeah"), a cough or a laugh (no words), or the agent's own
voice coming back through the speakers where the browser's echo canceller let it through.
Only the first may cut the reply. The words come from the same ASR as the turns.

Words alone cannot tell a hum from a remark: Whisper tiny.en reads a synthetic "Mhm." as
"and may come", "and make CHEM", "in a month" or "MHM" depending on the take and on the
CPU's instruction set (CTranslate2's paths differ there: docs/PERFORMANCE.md). So
`app/core/conversation.py` pauses the reply and lets a command word ("stop", "wait") interrupt
at once, any other words only if the user keeps talking over the paused reply: a hum, a
cough and the agent's own echo (it stops with the reply) do not.
"""

from __future__ import annotations

from app.language import words

# Words that acknowledge without taking the turn (lower case, punctuation stripped).
BACKCHANNELS = frozenset({
    "mhm", "mm", "mmm", "hmm", "hm", "uh", "um", "huh", "uhhuh", "uh-huh", "yeah", "yes",
    "yep", "ok", "okay", "right", "sure", "aha", "ah", "oh", "i", "see", "alright",
    "嗯", "对", "好", "是", "哦", "啊", "嗯嗯", "对对",
})


# Words that take the turn on their own, however short the utterance ("Stop!").
COMMANDS = frozenset({
    "stop", "wait", "hold", "hang", "cancel", "enough", "pause", "quiet", "shut", "actually",
    "excuse", "停", "等",
})

MIN_SCORE = -1.2
"""Below this mean token log-probability the words are a guess: no words. In the browser
tests interruptions score above it, though half a second of speech is hard to read, and
Whisper's guesses at a hum ("Mhm." heard as "and may Chen") below it (docs/PERFORMANCE.md)."""
HUM = frozenset("mhnu")  # "Mhm" comes back as "M.H.N.", "M.H.M.H.", "Hmm"


def verdict(heard: str, agent_text: str, score: float = 0.0, went_on: bool = False,
            sounds_echo: bool = False) -> str:
    """"command" (a word that stops the agent), "echo" (the agent's own words),
    "backchannel", "noise" (no words, a guess or a loop) or "words" (anything else).
    `went_on`: the voice went on over the paused reply once it was silent; a hum, a cough
    or the echo stops there, so two words or more read unsure are words still.
    `sounds_echo`: the audio follows the reply's own (`app.stages.echo`), whatever the
    words were read as; a command word still stops the agent."""
    from app.stages.whisper_read import MAX_COMPRESSION, compression_ratio

    w = words(heard)
    if not w:
        return "noise"
    letters = "".join(w)
    said_back = echo_similarity(letters, "".join(words(agent_text))) >= ECHO_SIMILARITY
    echo = sounds_echo or said_back
    if compression_ratio(heard) > MAX_COMPRESSION or loops(w):
        # Whisper looping on a sound ("Stay warm. Stay warm. ..."), or a reply that repeats
        # itself ("stay healthy, staying warm, stay safe") heard back
        return "echo" if echo else "noise"
    if any(x in COMMANDS for x in w) and not said_back:
        # read even when unsure: "wait stop" can come back below `MIN_SCORE`. The sound
        # does not outweigh it: a "stop" said over a loud echo matches the echo's sound,
        # and the reply's own words already tell a command the reply said
        return "command"
    if score < MIN_SCORE and not (went_on and len(w) >= 2):
        # a guess at a sound. Not so the user talking on over the silent reply (else the
        # rest of a sentence said over the reply, read "Okay, that's good." with a low
        # score, is taken for a noise and lost)
        return "noise"
    if all(x in BACKCHANNELS for x in w) or len(letters) <= 3 or set(letters) <= HUM:
        return "backchannel"
    return "echo" if echo else "words"


def loops(w: list[str]) -> bool:
    """A phrase of two or three words said three times or more, or nothing but a letter
    stuttered ("K-K-K-K"): Whisper looping on a sound it cannot read (a short text escapes
    the compression check). A stutter inside words ("I-I-I think you should stop") is the
    user's."""
    from collections import Counter

    if all(len(parts := x.split("-")) >= 3 and len(set(parts)) == 1 and len(parts[0]) == 1
           for x in w):
        return True
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
