"""Where the voice-to-voice benchmark's word errors come from: the same questions' audio
given to Whisper by different paths (bench.wer.mic_path, .endpointer_cut, .models) and
decoded in different ways (.beam)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from app.messages import MicFrame
from app.ops.machine import describe, machine
from app.ops.prepare import tiny_en_dir
from app.paths import MODELS, ROOT
from app.stages.asr import Asr
from app.stages.asr_config import CPU_SHORT_WINDOW_S, AsrConfig
from app.stages.vad import Endpointer, VadConfig
from bench.voice_to_voice import QUESTIONS, VOICES, speak, wer

OUT = ROOT / "docs" / "bench" / "asr_caps"
FRAME = 320  # 20 ms, as the page sends them
TINY_EN = tiny_en_dir()  # the demo's ASR
DEMO = AsrConfig(model=TINY_EN, language="auto", detect_model=str(MODELS / "whisper-base"),
                 cpu_threads=2, short_window_s=CPU_SHORT_WINDOW_S)
"""The demo's ASR: tiny.en (a 6 s window for a short utterance), Whisper base telling the
language when tiny.en is unsure."""


def whisper(path: str, beam_size: int = AsrConfig.beam_size) -> Asr:
    """The app's ASR on `path`, English, as the demo runs it (2 threads, 10 s window)."""
    asr = Asr(AsrConfig(model=path, language="en", cpu_threads=2, window_s=10.0,
                        beam_size=beam_size))
    asr.setup()
    return asr


def questions() -> list[tuple[str, str, np.ndarray]]:
    """The voice-to-voice benchmark's questions in its voices: (voice, question, 16 kHz
    audio), at the level its microphone file plays them (0.7 of the synthesised)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, q in enumerate(QUESTIONS):
            for v in VOICES:
                x, _ = sf.read(speak(q, v, Path(tmp) / f"q{i}-{v}.wav"), dtype="float32")
                out.append((v, q, x * 0.7))
    return out


def pauses(x: np.ndarray, eager_ms: int = VadConfig.eager_ms) -> list[np.ndarray]:
    """The audio of each `pause` the app's endpointer emits over `x` (16 kHz, fed in the
    page's 20 ms frames), in order."""
    ep = Endpointer(dataclasses.replace(VadConfig(), eager_ms=eager_ms))
    out = []
    for k in range(0, len(x) - FRAME + 1, FRAME):
        for ev in ep.feed(MicFrame(k // FRAME, x[k : k + FRAME], (k + FRAME) / 16, 0.0)):
            if ev.kind == "pause":
                out.append(ev.audio)
    return out


def score(asr: Asr, label: str, clips: list[tuple[str, str, np.ndarray]],
          errors: list[str]) -> tuple[float, list[float]]:
    """WER of `asr` over `clips` (voice, reference, audio) and the seconds each took; each
    misheard clip is added to `errors`, named by `label` and its voice, with the language
    the transcript came out in."""
    edits = words = 0
    took = []
    for voice, ref, audio in clips:
        t0 = time.perf_counter()
        heard = asr.process(0, audio)
        took.append(time.perf_counter() - t0)
        e, n = wer(ref, heard.text)
        edits, words = edits + e, words + n
        if e:
            errors.append(f"{label}, {voice}: {ref} -> {heard.text} [{heard.language}]")
    return round(edits / words, 3), took


def record(name: str, results: dict[str, float], errors: list[str]) -> None:
    """`results` (WER or ms per path) and the misheard clips as JSON and a markdown table,
    with the command, the date and the CPU, under docs/bench/asr_caps/NAME.{json,md}."""
    box = machine()
    command = " ".join(["python -m " + sys.modules["__main__"].__spec__.name, *sys.argv[1:]])
    date = dt.date.today().isoformat()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(
        json.dumps(
            {
                "command": command,
                "date": date,
                "machine": box,
                "results": results,
                "errors": errors,
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    lines = [
        f"Measured {date} on {describe(box)}; command: `{command}`.",
        "",
        "| path | figure |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in results.items()]
    lines += ["", "Misheard:", ""] + [f"- {e}" for e in errors]
    (OUT / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
