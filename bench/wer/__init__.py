"""Where the voice-to-voice benchmark's word errors come from: the same questions' audio
given to Whisper by different paths (bench.wer.mic_path, .endpointer_cut, .models)."""

from __future__ import annotations

import datetime as dt
import json
import sys

from app.asr import Asr
from app.config import ROOT, AsrConfig
from app.machine import describe, machine
from app.prepare import tiny_en_dir

OUT = ROOT / "docs" / "bench" / "asr_caps"
TINY_EN = tiny_en_dir()  # the demo's ASR


def whisper(path: str) -> Asr:
    """The app's ASR on `path`, English, as the demo runs it (2 threads, 10 s window)."""
    asr = Asr(AsrConfig(model=path, language="en", cpu_threads=2, window_s=10.0))
    asr.setup()
    return asr


def record(name: str, results: dict[str, float], errors: list[str]) -> None:
    """`results` (WER or ms per path) and the misheard clips as JSON and a markdown table,
    with the command, the date and the CPU, under docs/bench/asr_caps/NAME.{json,md}."""
    box = machine()
    command = "python -m " + sys.modules["__main__"].__spec__.name
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
