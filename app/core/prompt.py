"""The prompt's parts that are not the persona: the window of history sent with each
turn, and the persona file read."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.turn import Turn


def answered_pairs(kept: list[dict], leave_out: Turn | None = None) -> list[dict]:
    """The window's user/assistant pairs as the prompt has them: a reply still empty (a
    turn in flight) is left out with its question, and so is `leave_out`'s."""
    out: list[dict] = []
    for user, reply in zip(kept[::2], kept[1::2], strict=False):
        if reply["content"] and not (leave_out is not None and leave_out.owns(user)):
            out += [{"role": "user", "content": user["content"]},
                    {"role": "assistant", "content": reply["content"]}]
    return out


def history_start(n_messages: int, start: int, max_turns: int) -> int:
    """Index of the first history message to send: unchanged while the window holds at most
    `max_turns` user/assistant pairs (plus the new user message), then moved up to keep the
    newest half of them. History alternates user/assistant, so the start stays even."""
    pending = n_messages % 2  # the new user message, not answered yet
    if n_messages - start <= 2 * max_turns + pending:
        return start
    return n_messages - 2 * max(1, max_turns // 2) - pending


def load_persona(path: Path) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SystemExit(f"Cannot read the persona file {path}: {exc}") from exc
    if not text:
        raise SystemExit(f"The persona file {path} is empty.")
    return text
