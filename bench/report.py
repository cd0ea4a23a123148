"""What the small benchmarks share: their `--out` argument and their two files (the JSON
with every figure, the markdown table with the command, date and machine)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from app.ops.machine import describe, machine
from app.paths import ROOT


def parser(doc: str, name: str) -> argparse.ArgumentParser:
    """A benchmark's arguments, `--out` first (docs/bench/NAME/NAME by default)."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / name / name,
                    help="OUT.json and OUT.md are written")
    return ap


def header(module: str) -> tuple[dict, str, str]:
    """This machine, the command that ran, and the table's first words."""
    m = machine()
    command = f"python -m {module} " + " ".join(sys.argv[1:])
    return m, command, f"Measured {dt.date.today()} on {describe(m)}; command: `{command}`."


def write(out: Path, m: dict, command: str, lines: list[str], **figures) -> None:
    """OUT.json (the date, command, machine and `figures`) and OUT.md (`lines`), printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"date": str(dt.date.today()), "command": command, "machine": m, **figures}, indent=1))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
