"""A conversation's turn-taking events as JSON lines (`--record-events DIR`), and their
replay through `app.core.floor.step`.

The owner writes the conversation's rules first, then every event it applies: the inputs
(the endpointer's events, each frame's silence, the verdicts, the player's reports, typed
turns, the microphone's stop) and, marked `follow`, the answers its commands got (a
check's words, a started turn's id). Audio is not written, only its length. A replay
applies the inputs in order to `step` and answers its commands from the recorded answers,
so a change to the rules is judged on what the user did, not on what the old rules decided.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path

import numpy as np

from app.core import floor as fl
from app.core import floor_types as ft
from app.messages import EndOfTurn, PlayerReport, VadEvent

EVENTS = {cls.__name__: cls for cls in (
    ft.Voice, ft.Silence, ft.Heard, ft.Judged, ft.Played, ft.Started, ft.ChainOver,
    ft.Typed, ft.MicStop, ft.Deadline, ft.Rules)}
NESTED = {"vad": VadEvent, "joinable": ft.Joinable, "latest": ft.Latest, "check": ft.Check,
          "verdict": EndOfTurn, "report": PlayerReport}


def encode(value):
    """A dataclass as a dict of its fields (audio as its length in samples)."""
    if isinstance(value, np.ndarray):
        return {"samples": len(value)}
    if is_dataclass(value):
        return {f.name: encode(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, float):
        return round(value, 1)  # browser milliseconds: finer than any rule reads
    return value


def decode(cls, data: dict):
    """The dataclass `cls` from `encode`'s dict (audio comes back as None)."""
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name == "audio":
            value = None
        elif f.name in NESTED and isinstance(value, dict):
            value = decode(NESTED[f.name], value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def line(event, follow: bool = False) -> str:
    record = {"event": type(event).__name__, "t": round(time.time(), 2), **encode(event)}
    if follow:
        record["follow"] = True
    return json.dumps(record, ensure_ascii=False)


def read(path: Path) -> Iterator[tuple[object, bool]]:
    """(event, whether it answered a command) for each line of a recording (gzipped when
    its name ends in .gz)."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    for text in raw.decode().splitlines():
        if text.strip():
            data = json.loads(text)
            yield decode(EVENTS[data["event"]], data), bool(data.get("follow"))


class EventLog:
    """One file per session under `folder`, written as events are applied."""

    def __init__(self, folder: Path, sid: str, path: Path | None = None) -> None:
        """`path`: the session's file, appended to (a page that went away and came back)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.path = path or folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{sid[:8]}.jsonl"
        self._file = self.path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def write(self, event, follow: bool = False) -> None:
        with self._lock:
            self._file.write(line(event, follow) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass
class Replay:
    """What a recording's inputs made under today's rules: each voiced stretch's outcome,
    in order ("turn"; "continues": a turn that goes on from the last one, which it
    withdraws; or "let: <reason>"), and the player commands sent."""

    outcomes: list[str] = field(default_factory=list)
    player: list[str] = field(default_factory=list)


def replay(events: Iterable[tuple[object, bool]], rules: ft.Rules | None = None) -> Replay:
    """Apply the recorded inputs to `step`; commands are answered from the recording. The
    rules are the recording's own (its first line), unless `rules` are given."""
    events = list(events)
    recorded = [e for e, _ in events if isinstance(e, ft.Rules)]
    rules = rules or (recorded[0] if recorded else ft.Rules())
    events = [(e, follow) for e, follow in events if not isinstance(e, ft.Rules)]
    heard = [e.said for e, follow in events if follow and isinstance(e, ft.Heard)]
    started = [e.turn_id for e, follow in events if follow and isinstance(e, ft.Started)]
    out, state, continuing = Replay(), ft.Floor(), set()
    next_id = max([e.turn_id for e, _ in events if isinstance(e, ft.Started)] or [0]) + 1

    def apply(event) -> None:
        nonlocal state, next_id
        state, commands = fl.step(rules, state, event)
        for c in commands:
            if isinstance(c, ft.Check):
                apply(ft.Heard(c, heard.pop(0) if heard else "words"))
            elif isinstance(c, ft.StartTurn):
                if started:
                    turn_id = started.pop(0)
                else:
                    turn_id, next_id = next_id, next_id + 1
                if c.continues:
                    continuing.add(turn_id)
                if c.commit is not None:
                    out.outcomes.append("continues" if c.continues else "turn")
                apply(ft.Started(turn_id, c.commit is not None, c.model_go))
            elif isinstance(c, ft.Commit):
                out.outcomes.append("continues" if c.turn_id in continuing else "turn")
            elif isinstance(c, ft.Let):
                out.outcomes.append(f"let: {c.reason}")
            elif isinstance(c, ft.PausePlayer | ft.ResumePlayer):
                out.player.append(type(c).__name__)
            elif isinstance(c, ft.Interrupt) and (c.playing or c.current):
                out.player.append("Interrupt")

    for event, follow in events:
        if not follow:
            apply(event)
    return out
