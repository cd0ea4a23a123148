"""The app's configuration: `AppConfig` gathers each component's settings, which live beside
their components in app/stages/ (the CLI that fills them in: app/ops/cli.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.paths import ROOT
from app.stages.asr_config import AsrConfig
from app.stages.endofturn import TurnConfig
from app.stages.llm import Endpoint, LlmConfig
from app.stages.tts.base import TtsConfig
from app.stages.vad import VadConfig

PRIMARY_MODEL = "Twu31/Qwen3.6-35B-A3B-GPTQ-INT4-W4A16-LowLatency"
"""The primary endpoint's checkpoint `--launch` serves (`--primary-checkpoint`)."""

DEMO_REPLY_S = 3.5
"""`--reply-seconds` of the demo: its small model ignores the persona's "short replies"."""

DEMO_ASR_THREADS = 1
"""`--asr-threads` of the 2-core demo. Alone, tiny.en decodes a clip faster on one
CTranslate2 thread than on two, on both of its CPU backends (MKL on Intel, oneDNN on AMD),
and the other core stays with the page, the VAD and TTS (docs/PERFORMANCE.md)."""


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
