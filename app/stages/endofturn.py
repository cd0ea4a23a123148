"""End of turn by what was said: is the user's utterance so far finished, or a pause to think?

A turn starts speculatively at the user's first short pause (app/core/conversation.py); once its
transcript is known, `TurnDetector.judge` says how long the silence must last before the
turn commits: at once when the words are finished, up to `cap_ms` when they are not, the
fixed silence when it cannot tell. The signals, each measured on a labelled set of paused
and complete utterances (`python -m bench.turn_detection`, docs/PERFORMANCE.md):

- words: the transcript's last word. English prepositions, conjunctions, articles,
  auxiliaries, "to", possessives and fillers, Mandarin connectives and structural
  particles, and a trailing comma or ellipsis (Whisper writes one where the voice went on)
  leave a sentence unfinished; finished-looking words the ASR closed with no mark are held a
  little (`TurnConfig.unmarked_ms`); where Whisper nearly wrote the mark
  (`Transcript.close_p`, `TurnConfig.close_p`) the words cannot tell, and the fixed
  silence decides. Costs nothing.
- model: the served model's probability that the user's message ends here, read as the
  prompt log-probability of its chat template's end-of-message token after the words
  (LiveKit's turn detector works this way). One short prefill on the model server.
- audio: Smart Turn v3.2's P(complete) from the voice (app/stages/smartturn.py), a short inference
  on the CPU.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.language import CLOSERS, is_cjk
from app.messages import EndOfTurn, Signal
from app.stages.llm import THINKING_OFF, Endpoint, ServerError, post_json
from app.stages.vad import VadConfig

log = logging.getLogger(__name__)


@dataclass
class TurnConfig:
    """The end of a turn by what was said (`TurnDetector`); thresholds chosen on the
    labelled set of `python -m bench.turn_detection` (docs/PERFORMANCE.md)."""

    detector: str = "words"
    """"off" (the fixed silence, `VadConfig.silence_ms`), or the signals joined by "+":
    "words" (an open ending such as "for", "and", "因为"), "model" (the served model's
    probability that the message ends there), "audio" (Smart Turn v3.2 on the voice)."""
    cap_ms: int = 2000
    """An unfinished utterance commits anyway after this much silence."""
    unmarked_ms: int = 1000
    """Words that look finished but that the ASR closed with no mark (".", "?", "!") commit
    after this much silence: Whisper leaves the mark out where the voice did not sound
    finished, and it misread the open ending of a half sentence so ("We can take that rain"
    for "... the train or", "Please" for "Please add the"); finished turns it leaves
    unclosed wait too (a few of the benchmarks' transcripts, `docs/PERFORMANCE.md`), unless
    it nearly closed them (`close_p`). Longer than a pause to think. English script only:
    tiny.en and base write Mandarin with no marks as often as with them."""
    close_p: float = 0.25
    """Such words commit after the fixed silence (`VadConfig.silence_ms`) instead, where
    Whisper gave a closing mark at least this probability at their end
    (`Transcript.close_p`): it nearly wrote one, and the words cannot tell. Finished
    sentences left unclosed mostly read above it, but so did some halves said with a short
    gap inside ("Why is the sky"), while misread halves ("Please", "Remind me, Lord") read
    below it: not a sign of the end, only that the words are unsure. It is low enough that
    a loop's first copy of a finished question, which reads a little lower on CTranslate2's
    oneDNN path than on MKL, still clears it instead of waiting `unmarked_ms`
    (docs/PERFORMANCE.md). 1: never."""
    model_done: float = 0.1
    """The model's end-of-message probability at or above which the turn commits at once. A
    small model gives even finished sentences a low one, so it is low; choose it for the
    served model with `python -m bench.turn_detection --base-url` (docs/PERFORMANCE.md)."""
    model_unfinished: float = 0.01
    """Below it the utterance is held as unfinished (up to `cap_ms`): sentences cut at a
    pause read far lower than finished ones (docs/PERFORMANCE.md)."""
    audio_done: float = 0.5
    """Smart Turn's P(complete) at or above which the turn commits at once."""
    continue_ms: int = 1500
    """Speech that starts this soon after a committed voice turn's last voiced frame (after
    the cap, for words held as unfinished), and is not a command or the agent's own voice,
    continues that turn: the reply stops and the two utterances become one turn, one
    transcript, one answer ("I'd like a table for ... two people": the words at the pause
    looked finished, or a slow box let it commit). 0: off (it is an interruption like any
    other)."""


DETECTORS = ("off", "words", "model", "audio", "words+model", "words+audio", "model+audio",
             "words+model+audio")
"""The values of `TurnConfig.detector` (`--turn-detector`)."""

# English words after which a sentence cannot end (function words that need what follows).
# Not "you": it is an object as often as a subject, and ends "Who are you?", "Thank you",
# "See you" (with it, bench.capacity's "Hello, who are you?" waits the whole cap).
UNFINISHED_EN = frozenset("""
a an the my your his her its our their this that these those some any every each no
of to for with from at by in into onto on about as than like over under after before
between through during without within against toward towards upon via per
and or but nor so because although though if unless whether while when where which who
whom whose what how why until since once then
gonna wanna gotta let's
i he she we they it's i'm you're we're they're there's
um uh er erm hmm ah mm
""".split())
# Auxiliaries: open at the end of a statement ("My flight has been"), not of a question
# ("Do you know where the station is?").
AUXILIARIES = frozenset("""is are was were am be been being do does did have has had will
would can could shall should may might must""".split())
# Prepositions a wh-question may end on ("Who did you go with?", "Where are you from?").
STRANDED = frozenset("for with from about on of at in into off up out over by".split())
WH_WORDS = frozenset("what who whom whose which where".split())
# A verb with its indirect object only: the thing told, shown or given is still to come;
# and a subject with a verb whose clause or object is still to come ("So I think ...", as
# "觉得" below; not "I guess" or "I know", which answer a question).
UNFINISHED_PAIRS = frozenset(
    [(verb, "me") for verb in "tell show give send bring get find buy".split()]
    + [(subject, verb) for subject in "i we you they".split()
       for verb in "think want need hope believe wish".split()])
# Mandarin endings that leave a clause open: connectives, prepositions, structural particles,
# fillers ("那个", "就是"), verbs that need an object.
UNFINISHED_ZH = ("和", "跟", "与", "或者", "还是", "但是", "可是", "不过", "因为", "所以",
                 "然后", "如果", "虽然", "而且", "并且", "就是", "那个", "这个", "的", "地",
                 "得", "把", "被", "给", "对", "从", "在", "向", "往", "比", "让", "想", "要",
                 "是", "呃", "嗯", "额", "还有", "以及", "一个", "一张", "一下",
                 # verbs whose clause or object is still to come ("I think that ...")
                 "觉得", "认为", "以为", "希望", "打算", "帮我", "告诉我", "让我",
                 # "is there / can / will ..." asked before what is asked about
                 "有没有", "能不能", "会不会", "可不可以")
# Words that end a sentence although they end with one of those: answers and their like
# ("好的", "是的", "我不要", "我也是"), and "现在", "重要" (a word, not "在" or "要").
FINISHED_ZH = ("好的", "是的", "对的", "真的", "不要", "不想", "也是", "不是", "不对", "现在",
               "不在", "重要")
# A Mandarin reading this short is judged only when it is a reply of its own or ends with a
# sentence-final particle: Whisper reads the first word or two of a sentence said before a
# pause as other words, closed with a mark ("保我。" for "帮我 ...").
SHORT_ZH = 2
SHORT_REPLIES_ZH = ("好", "好的", "对", "对的", "是", "是的", "行", "谢谢", "没有", "可以", "不用",
                    "不要", "不是", "不对", "当然", "再见", "你好", "算了")
PARTICLES_ZH = "吗呢吧啊呀了哦嘛啦"
# A clause with "是" may end with "的" ("这首歌是谁唱的", "我是坐飞机来的").
SHI_DE = re.compile(r"是[^，,。？！?!、；;]*的$")
TRAILING_PUNCT = ".!?。！？,，、;；:：…\"'”’ "
# A last word Whisper aligned to less voice than this it added where the voice stopped, at a
# pause ("a table for it." for "a table for", "... with me?", "trying to find it."): tiny.en
# gives such words less voice than any word really said, on the labelled set offline and
# live in the page; this lies between the two (docs/PERFORMANCE.md).
GUESSED_S = 0.09
CLOSING_QUOTES = "\"'”’)] "
OPEN_ENDING = re.compile(r"(\.\.\.|…|,|，|、|-|—)\s*$")


def normalize(text: str) -> str:
    """The words as the model should read them: no trailing punctuation, spaces squeezed."""
    return " ".join(text.split()).rstrip(TRAILING_PUNCT)


def unfinished_ending(text: str) -> str | None:
    """The ending that leaves `text` unfinished ("for", "tell me", "因为", "..."), or None."""
    stripped = text.strip()
    if not stripped:
        return None
    if match := OPEN_ENDING.search(stripped):
        return match.group(1)
    words = normalize(stripped)
    if not words:
        return None
    if is_cjk(words[-1]):
        if words.endswith(FINISHED_ZH) or SHI_DE.search(words) or words in SHORT_REPLIES_ZH:
            return None
        return next((e for e in UNFINISHED_ZH if words.endswith(e)), None)
    tokens = [w.lower().strip("\"'“”‘’") for w in words.split()]
    last = tokens[-1]
    if len(tokens) >= 2 and (tokens[-2], last) in UNFINISHED_PAIRS:
        return f"{tokens[-2]} {last}"
    question = stripped.endswith("?")
    if last in STRANDED and tokens[0] in WH_WORDS and question:
        return None  # "What are you looking for?": a wh-question ends on its preposition
    if last in AUXILIARIES:
        return None if question else last
    return last if last in UNFINISHED_EN else None


def short_reading(text: str) -> bool:
    """Whether `text` is Mandarin too short to judge (`SHORT_ZH`)."""
    chars = "".join(c for c in normalize(text) if is_cjk(c) and c not in "，、。？！")
    return 0 < len(chars) <= SHORT_ZH and chars not in SHORT_REPLIES_ZH \
        and chars[-1] not in PARTICLES_ZH


def closed(text: str) -> bool:
    """Whether the ASR ended `text` with a closing mark: Whisper leaves it out where the
    voice did not sound finished, in Mandarin as in English (where it nearly wrote one,
    `Transcript.close_p` says so)."""
    stripped = text.rstrip(CLOSING_QUOTES)
    return not stripped or stripped.endswith(CLOSERS)


class EndOfTurnModel:
    """P(the user's message ends here) from the served model's prompt log-probabilities."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 2.0) -> None:
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self._end_token: int | None = None
        self._close: list[list[int]] | None = None

    def _tokens(self, messages: list[dict], open_end: bool) -> list[int]:
        body = {"model": self.endpoint.model, "messages": messages,
                "add_generation_prompt": False, "continue_final_message": open_end,
                "chat_template_kwargs": THINKING_OFF}
        return list(post_json(self.endpoint, "/tokenize", body, self.timeout_s)["tokens"])

    def setup(self) -> None:
        """Learn the chat template's end-of-message token from a probe, and pay the
        server's first scoring request (its one-off set-up) here, not in a turn."""
        probe = [{"role": "user", "content": "Hello there"}]
        open_, closed = self._tokens(probe, True), self._tokens(probe, False)
        if closed[:len(open_)] != open_ or len(closed) <= len(open_):
            raise ServerError("the chat template does not close a user message with a token")
        self._end_token = closed[len(open_)]
        self.p_end("Hello there", timeout_s=60.0)

    def _closers(self) -> list[list[int]]:
        """Token ids of the punctuation a finished message may end with: ".", "?", "!"
        and their CJK forms (each as this tokenizer writes it after a word)."""
        if self._close is None:
            ids = [post_json(self.endpoint, "/tokenize", {"model": self.endpoint.model,
                                                          "prompt": p, "add_special_tokens":
                                                          False}, self.timeout_s)["tokens"]
                   for p in CLOSERS]
            self._close = [t for t in ids if len(t) == 1]
        return self._close

    def p_end(self, text: str, context: str = "", timeout_s: float | None = None) -> float:
        """Probability that the user's message is over after `text` (the agent's last
        reply, if any, as context): that the end-of-message token comes next, or after
        one closing punctuation mark. The ASR's own closing punctuation is left out (it
        writes "a table for." as readily as "for two."): the model judges whether a mark
        belongs there. One batched prefill of a few short prompts."""
        if self._end_token is None:
            self.setup()
        messages = [{"role": "assistant", "content": context}] if context else []
        messages.append({"role": "user", "content": normalize(text)})
        head = self._tokens(messages, True)
        closers = self._closers()
        prompts = [[*head, self._end_token]] + [[*head, *c, self._end_token] for c in closers]
        body = {"model": self.endpoint.model, "prompt": prompts, "max_tokens": 1,
                "temperature": 0.0, "prompt_logprobs": 0}
        out = post_json(self.endpoint, "/v1/completions", body, timeout_s or self.timeout_s)
        total = 0.0
        for choice in out["choices"]:
            tail = prompts[choice["index"]][len(head):]
            entries = choice["prompt_logprobs"][len(head):]
            total += math.exp(sum(float(entry[str(token)]["logprob"])
                                  for token, entry in zip(tail, entries, strict=True)))
        return min(1.0, total)


def heard_words(text: str, last_word_s: tuple[float, float] | None) -> tuple[str, str]:
    """The words to judge: `text` less a last word that the ASR aligned to no voice
    (`last_word_s`, under `GUESSED_S`: guessed where the voice stopped), and that word."""
    if last_word_s is None or last_word_s[1] - last_word_s[0] >= GUESSED_S:
        return text, ""
    words = normalize(text)
    if words and is_cjk(words[-1]):  # a CJK character is a word
        return words[:-1], words[-1]
    head, _, last = words.rpartition(" ")
    return head, last


def decide(cfg: TurnConfig, silence_ms: int, uses: set[str], text: str,
           p_model: Callable[[], float], p_audio: Callable[[], float],
           guessed: str = "", close_p: float | None = None) -> tuple[int, Signal, str]:
    """The hold (ms of silence before the commit), the signal that decided and what it saw,
    from the signals in `uses`; each probability is asked for only when it is needed.
    `text`: the words heard (`heard_words`); `guessed`: a last word left out of them;
    `close_p`: Whisper's probability of a closing mark where it wrote none."""
    if not uses:
        return silence_ms, "fixed", "detector off"
    if not text.strip():
        return silence_ms, "fixed", "no words"
    note = f" (“{guessed}”: no voice)" if guessed else ""
    if "words" in uses:
        ending = unfinished_ending(text)
        if ending is not None:
            return cfg.cap_ms, "words", f"ends with “{ending}”{note}"
    if "model" in uses:
        p = p_model()
        if p >= cfg.model_done:
            return 0, "model", f"p(end) {p:.2f}"
        if p < cfg.model_unfinished:
            return cfg.cap_ms, "model", f"p(end) {p:.2f}"
        if "audio" not in uses:
            return silence_ms, "fixed", f"unsure: p(end) {p:.2f}"
    if "audio" in uses:
        p = p_audio()
        if p >= cfg.audio_done:
            return 0, "audio", f"p(done) {p:.2f}"
        return cfg.cap_ms, "audio", f"p(done) {p:.2f}"
    if "words" in uses and short_reading(text):
        return cfg.unmarked_ms, "words", "a word or two" + note
    if "words" in uses and (guessed or not closed(text)):
        if not guessed and close_p is not None:
            note = f", p(mark) {close_p:.2f}"
            if close_p >= cfg.close_p:  # Whisper nearly closed it: the words cannot tell
                return silence_ms, "fixed", "unsure: no closing mark" + note
        return cfg.unmarked_ms, "words", "no closing mark" + note
    return 0, "words", "no open ending" + note


class TurnDetector:
    """The end-of-turn decision the configuration asks for (`TurnConfig.detector`)."""

    def __init__(self, cfg: TurnConfig, silence_ms: int, endpoint: Endpoint | None = None,
                 audio_model=None) -> None:  # app.stages.smartturn.SmartTurn
        self.cfg, self.silence_ms = cfg, silence_ms
        self.uses = set(cfg.detector.split("+")) - {"off"}
        self.model = EndOfTurnModel(endpoint) if "model" in self.uses and endpoint else None
        self.audio = audio_model if "audio" in self.uses else None
        if self.model is None:
            self.uses.discard("model")
        if self.audio is None:
            self.uses.discard("audio")

    @property
    def on(self) -> bool:
        return bool(self.uses)

    def describe(self) -> str:
        if not self.on:
            return f"end of turn: {self.silence_ms} ms of silence"
        return (f"end of turn: {'+'.join(sorted(self.uses))} (unfinished: held up to "
                f"{self.cfg.cap_ms} ms of silence; unsure: {self.silence_ms} ms)")

    def judge(self, turn_id: int, text: str, audio: np.ndarray | None = None,
              context: str = "", last_word_s: tuple[float, float] | None = None,
              close_p: float | None = None) -> EndOfTurn:
        """Is the utterance `text` (its `audio`; `context`: the agent's last reply;
        `last_word_s`: where the ASR put its last word in the audio; `close_p`: its
        probability of a closing mark where it wrote none) over? A model that fails leaves
        the decision to the fixed silence."""
        t0 = time.perf_counter()
        if last_word_s is not None:  # with the verdict's line: what a cut-off was judged on
            log.info("turn %s: %r, its last word at %.2f-%.2f s of its audio%s", turn_id,
                     text[-60:], *last_word_s,
                     "" if close_p is None else f", p(mark) {close_p:.2f}")
        text, guessed = heard_words(text, last_word_s)
        try:
            hold, signal, detail = decide(
                self.cfg, self.silence_ms, self.uses, text,
                lambda: self.model.p_end(text, context),
                lambda: self.audio(audio) if audio is not None else 0.0, guessed, close_p)
        except (ServerError, KeyError, IndexError, ValueError) as exc:
            hold, signal, detail = self.silence_ms, "fixed", f"model failed: {exc}"[:120]
        return EndOfTurn(turn_id, hold, signal, detail,
                         round((time.perf_counter() - t0) * 1000, 1))


def turn_detector(turn: TurnConfig, vad: VadConfig, endpoint: Endpoint | None) -> TurnDetector:
    """The end-of-turn decision `turn` asks for (it needs speculation: `vad.eager_ms`), the
    model signal's on `endpoint`."""
    turn = turn if vad.eager_ms else dataclasses.replace(turn, detector="off")
    audio = None
    if "audio" in turn.detector:
        from app.stages.smartturn import SmartTurn

        audio = SmartTurn()
    return TurnDetector(turn, vad.silence_ms, endpoint, audio)
