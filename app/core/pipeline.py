"""One conversational turn, written out in order: ASR -> LLM (streamed) -> chunker -> TTS.

The chain, as a turn runs it (each stage its own module, passing `app.messages` types):

    audio --Asr--> Transcript --stream_chat--> ReplyDelta --SentenceChunker--> ReplyPiece
          --Voice--> SpeechChunk --Turn.emit_audio--> the page's player

The model's reply is read on the turn's thread and cut into pieces; a TTS thread speaks
the pieces while the model still generates, so synthesis delays neither the reading of the
stream (per-token timing) nor the first audio. A voice turn may run speculatively: the
`Turn` holds what it produces until the endpointer commits it (app/core/turn.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from app.config import AppConfig
from app.core.prompt import answered_pairs, history_start, load_persona
from app.core.rival import Later, Rival
from app.core.session import Session
from app.core.turn import Turn
from app.messages import RATE, ReplyPiece, SpeechChunk, Transcript
from app.metrics import TurnMetrics
from app.stages.asr import Asr, Transcriber
from app.stages.asrhost import RemoteAsr
from app.stages.audio import keep_heard
from app.stages.budget import ReplyBudget, within
from app.stages.chunking import SentenceChunker
from app.stages.endofturn import turn_detector
from app.stages.llm import (
    ChatStream,
    Endpoint,
    LlmError,
    OpenAIChat,
    StreamStats,
    client_for,
    prefill,
)
from app.stages.padding import (
    CARD_BLOCKS,
    PaddingError,
    block_size,
    cache_config,
    pad_to_block,
    system_token_counter,
)
from app.stages.replytext import StandIn, TagStripper, language_name, language_notice
from app.stages.servermetrics import ServerViews
from app.stages.tts import TtsError, Voice, language_of

log = logging.getLogger(__name__)
Heard = Callable[[Turn, Transcript, np.ndarray], None]


class Agent:
    """The stages shared by every session: set up once, used by many turns."""

    def __init__(self, cfg: AppConfig, asr: Transcriber | None = None,
                 tts: Voice | None = None, llm: ChatStream | None = None):
        from app.stages.tts import build_tts
        from app.stages.tts.host import RemoteTts

        self.cfg = cfg
        self.asr = asr or (RemoteAsr(cfg.asr.host) if cfg.asr.host else Asr(cfg.asr))
        self.tts = tts or (RemoteTts(cfg.tts.host) if cfg.tts.host else build_tts(cfg.tts))
        self.llm = llm or OpenAIChat()
        self.persona = load_persona(cfg.persona)
        self.persona_note = "not padded"
        self.server_views = ServerViews()
        self._prefix_caching: dict[str, bool] = {}
        self.detector = turn_detector(cfg.turn, cfg.vad, cfg.primary)
        self.ab = Rival(cfg, self.llm, self.server_views)

    def setup(self) -> None:
        self.asr.setup()
        self.tts.setup()
        if isinstance(self.llm, OpenAIChat):  # its clients, made now, not in a first turn
            for ep in filter(None, (self.cfg.primary, self.cfg.anchor)):
                client_for(ep, self.cfg.llm.timeout_s)
        if self.detector.audio is not None:
            self.detector.audio.setup()

    def pad_persona(self) -> str:
        """Pad the persona to the primary server's prefix-cache block; say what was done."""
        if not self.cfg.persona_padding:
            self.persona_note = "padding off"
            return self.persona_note
        endpoint = self.cfg.primary
        block, source = block_size(endpoint, self.cfg.persona_block)
        if not block:
            block, source = CARD_BLOCKS["bf16-ssm"], "card default"
        try:
            padded = pad_to_block(self.persona, system_token_counter(endpoint), block)
        except PaddingError as exc:
            self.persona_note = f"not padded ({exc})"
            return self.persona_note
        self.persona = padded.text
        self.persona_note = (f"{padded.original_tokens:,} tokens, padded to {padded.tokens:,} "
                             f"= {padded.tokens // block} x {block}-token blocks ({source})")
        return self.persona_note

    def warm(self, session: Session | None = None) -> threading.Thread | None:
        """Prefill, on a thread, what the next turn's prompt starts with where the prefix
        cache cannot have it: the persona at start (else the first turn computes it), and,
        once a turn is over, the session's history as the next prompt will have it. The
        cache holds only the blocks of what was prompted, never the reply as the history
        renders it: without this, each turn's prompt computes the last reply and question
        again (a large share of its tokens, and of TTFT), and a turn that moves the history
        window's start shares only the persona with the one before (several times the TTFT
        on the CPU; docs/PERFORMANCE.md). Each server of
        the A/B that caches prefixes. The messages end with an empty user message, rendered
        without the assistant's opening: the text is the next prompt's up to the user's
        words (and a template that marks the last reply, or wants a user message, renders
        it as the next prompt will). The conversation's next request waits for it
        (`ServerViews.aside`): its figures stay its own, its prompt finds the prefix."""
        if not isinstance(self.llm, OpenAIChat) or not self.cfg.llm.prefill:
            return None
        messages = [{"role": "system", "content": self.system_prompt(session)}]
        key = session.sid if session is not None else ""
        if session is not None:
            with session.lock:
                n = len(session.history) + 1  # with the next user message
                start = history_start(n, session.history_start, self.cfg.llm.history_turns)
                messages += answered_pairs(session.history[start:])  # as `messages` will
        messages.append({"role": "user", "content": ""})

        endpoints = [ep for ep in (self.cfg.primary, self.cfg.anchor) if ep is not None]
        overs = [self.server_views.aside(ep, key) for ep in endpoints]  # before any turn asks

        def run() -> None:
            for endpoint, over in zip(endpoints, overs, strict=True):
                ran = False
                try:
                    if self._caches_prefixes(endpoint):
                        ran = True
                        prefill(endpoint, messages, self.cfg.llm)
                except Exception as exc:  # the next turn computes it, as without
                    log.info("prefill on %s: %s", endpoint.name, exc)
                finally:
                    over(ran)

        thread = threading.Thread(target=run, daemon=True, name="prefill")
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had: the turn goes on without
            log.warning("prefill not started: %s", exc)
            for over in overs:
                over(False)
            return None
        return thread

    def _caches_prefixes(self, endpoint: Endpoint) -> bool:
        """The server keeps prefixes (its vllm:cache_config_info; asked once)."""
        known = self._prefix_caching.get(endpoint.base_url)
        if known is None:
            labels = cache_config(endpoint) or {}
            known = self._prefix_caching[endpoint.base_url] = \
                labels.get("enable_prefix_caching") != "False"
        return known

    def messages(self, session: Session, user_text: str,
                 leave_out: Turn | None = None) -> list[dict]:
        """Persona + the history window + the new user message. The window's start moves
        in jumps of half its size, not one turn at a time: a sliding start changes the
        prompt right after the persona on every turn and the prefix cache then serves
        nothing past it (measured: docs/PERFORMANCE.md). A reply still empty (a turn in
        flight) is left out with its question, and so is `leave_out`'s (the turn that
        `user_text` continues)."""
        with session.lock:
            session.history_start = history_start(len(session.history) + 1,
                                                  session.history_start,
                                                  self.cfg.llm.history_turns)
            keep = answered_pairs(session.history[session.history_start:], leave_out)
        return [{"role": "system", "content": self.system_prompt(session)}, *keep,
                {"role": "user", "content": user_text}]

    def system_prompt(self, session: Session | None) -> str:
        """The persona, or the instructions the session's client set (a Realtime client's)."""
        if session is not None and session.instructions:
            return session.instructions
        return self.persona

    def new_turn(self, session: Session, source: str, last_voiced_ms: float | None = None,
                 endpoint: Endpoint | None = None) -> Turn:
        endpoint = endpoint or self.cfg.primary
        if session.channel:  # the records say how the user reached the agent
            source = f"{session.channel}-{source}"
        m = TurnMetrics(session.new_turn_id(), endpoint.name, source=source,
                        model=endpoint.model, order="primary" if self.cfg.anchor else "")
        turn = Turn(session, m, last_voiced_ms)
        turn.stamp("start")
        return turn

    def run_turn(self, turn: Turn, audio: np.ndarray | None = None, text: str = "",
                 endpoint: Endpoint | None = None, heard: Heard | None = None,
                 later: Later | None = None) -> TurnMetrics:
        """The chain for one turn; returns its primary metrics row. `heard` gets the
        transcript of a voice turn as soon as it is known (the end-of-turn decision);
        `later` takes the A/B anchor's request, to send it when the conversation is idle
        (sequential A/B; without it the request goes at once, after the turn)."""
        session, m = turn.session, turn.metrics
        endpoint = endpoint or self.cfg.primary
        language = self.cfg.language
        # 1. ASR (started speculatively at the user's first short pause)
        if audio is not None:
            turn.stamp("asr_start")
            try:
                tr = self.asr.process(turn.turn_id, audio,
                                      expect=session.heard_language)
            except Exception as exc:  # a broken model file or runtime error: report the stage
                return self._fail(turn, "asr", f"speech recognition failed: {exc}")
            turn.transcribed(tr, len(audio) / RATE)
            if heard is not None:
                heard(turn, tr, audio)
            if self.cfg.keep_audio is not None:  # after the verdict: off its path
                keep_heard(self.cfg.keep_audio, f"{session.sid[:8]}-{turn.turn_id}", audio,
                           tr.text, tr.language, tr.score)
            text, language = tr.text, tr.language if language == "auto" else language
            if not text:
                return self._fail(turn, "asr", "No words recognised; please try again.")
            if language not in self.cfg.model_languages:
                return self._language_notice(turn, text, language)
        # a speculative turn's request waits for a longer silence (`model_after_ms`)
        if not turn.wait_model_go():
            return m
        messages = self.messages(session, text, turn.continues)
        turn.set_user_text(text)
        rival = self.ab.start(turn, messages)  # A/B on separate GPUs: at the same moment
        # 2. LLM, streamed -> 3. chunker -> 4. TTS on its own thread, while the model goes on
        pieces: queue.Queue = queue.Queue()
        speaker = threading.Thread(target=self._speak, daemon=True, name=f"tts-{turn.turn_id}",
                                   args=(turn, pieces, language))
        speaker.start()
        if turn.published:
            session.touch("Thinking...")
        error = self._stream(turn, endpoint, messages, pieces, language)
        speaker.join(timeout=60)
        # 5. a speculative turn the user talked over is dropped here, unseen and unheard
        if not turn.wait_decided():
            return m
        turn.finish(error)
        # 6. A/B on one GPU (or CPU): the anchor runs once the primary turn is over, and
        # with a page, only while the user neither speaks nor waits for a reply
        self.ab.after(turn, messages, rival, later)
        if not m.cancelled:  # an interrupted reply is cut in the history later
            self.warm(session)  # the next turn's prompt up to its question
        if error:
            return self._fail(turn, "llm", error)
        turn.refresh()
        session.touch("Interrupted." if m.cancelled else "Ready.")
        return m

    def _stream(self, turn: Turn, endpoint: Endpoint, messages: list[dict], pieces: queue.Queue,
                language: str) -> str:
        """Stream the reply into the turn and, cut into pieces, into the TTS queue."""
        stats, error = StreamStats(), ""
        chunker = SentenceChunker(first_max_words=self.cfg.tts.first_piece_words)
        tag = TagStripper(self.cfg.persona_tag)
        # what the voice reads: the model's words, or a dry run's stand-in in their timing
        spoken = StandIn(turn.turn_id, language).push if self.cfg.tts.stand_in else (lambda t: t)
        index = 0

        def put(texts: list[str]) -> None:
            nonlocal index
            for text in texts:
                turn.piece_cut(index, stats.deltas)
                pieces.put(ReplyPiece(turn.turn_id, index, text, time.perf_counter(),
                                      stats.deltas))
                index += 1

        before = self.server_views.before(endpoint, turn.session.sid)
        turn.stamp("llm_sent")
        budget = ReplyBudget(self.cfg.llm.reply_sentences, self.cfg.llm.reply_seconds)
        try:
            for delta in within(self.llm.stream(endpoint, messages, self.cfg.llm,
                                                turn.turn_id, stats, turn.cancel), budget):
                turn.on_delta(delta, stats.sent)
                put(chunker.push(spoken(tag.push(delta.text))))
        except LlmError as exc:
            error = str(exc)
        if budget.over:  # the rest of the reply was never generated
            stats.finish_reason = "budget"
            turn.budget_ended()
        if not turn.cancel.is_set():
            put(chunker.push(spoken(tag.flush())) + chunker.flush())
        pieces.put(None)
        turn.streamed(stats, self.server_views.after(endpoint, before))
        return error

    def _speak(self, turn: Turn, pieces: queue.Queue, language: str) -> None:
        session = turn.session
        default = language if language in ("en", "zh") else "en"
        while (piece := pieces.get()) is not None:
            if turn.cancel.is_set():
                continue
            turn.stamp("tts_start")
            text = piece.text  # what the chunker cut: the model's words or a stand-in's
            try:
                pcm, rate, engine, note = self.tts.synthesize(
                    text, language_of(text, default=default))
            except TtsError as exc:
                turn.stage_failed("tts", str(exc))
                session.touch(f"TTS failed: {exc}")
                continue
            turn.spoke_with(f"{engine} ({note})" if note else engine)
            if note:
                session.touch(f"Speaking with {engine}: {note}")
            turn.emit_audio(SpeechChunk(turn.turn_id, piece.index, pcm, rate, text,
                                        engine, time.perf_counter()))

    def _language_notice(self, turn: Turn, text: str, language: str) -> TurnMetrics:
        """Speech in a language the model does not speak: a short notice in both languages,
        spoken and written, instead of a reply the user could not use."""
        m = turn.metrics
        notice = language_notice(language, self.cfg.model_languages)
        turn.set_user_text(text)
        turn.add_reply(notice)
        pieces: queue.Queue = queue.Queue()
        for index, piece in enumerate(SentenceChunker(first_max_words=99).push(notice + " ")):
            turn.piece_cut(index, 0)
            pieces.put(ReplyPiece(turn.turn_id, index, piece, time.perf_counter(), 0))
        pieces.put(None)
        self._speak(turn, pieces, language)  # held until the turn is committed
        if not turn.wait_decided():
            return m
        turn.finish()
        turn.stage_failed("language", f"speech in {language_name(language)}: "
                          f"the model speaks {', '.join(self.cfg.model_languages)} only "
                          "(notice given)")
        turn.refresh()
        turn.session.touch("Ready.")
        return m

    def _fail(self, turn: Turn, stage: str, message: str) -> TurnMetrics:
        """Report a failed turn once it is the user's (a discarded speculation says nothing)."""
        if not turn.committed and not turn.wait_decided():
            return turn.metrics
        turn.fail(stage, message)
        log.warning("turn %s failed at %s: %s", turn.turn_id, stage, message)
        return turn.metrics
