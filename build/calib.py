"""Calibration set: spoken dialogues rendered through the model's own chat template.

Input: JSONL, one dialogue per line:
    {"system": "optional system prompt", "turns": [{"role": "user", "content": "..."},
                                                   {"role": "assistant", "content": "..."}]}
The card's mix: ~60 % dialogues under the persona system prompt, ~20 % the same dialogues
without a system prompt, ~20 % general chat (zh/en); each sample is whole conversations
packed until it holds at least `seq_len` tokens, rendered with thinking off.
The files under build/data/ are a small set written for this project so the command runs
out of the box; a real build wants a few hundred dialogues of your own.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
DIALOGUES = DATA / "calib_dialogues.jsonl"
GENERAL = DATA / "calib_general.jsonl"
MIX = {"persona": 0.6, "plain": 0.2, "general": 0.2}
ROLES = {"user", "assistant"}


class CalibError(ValueError):
    pass


def load(path: Path, min_records: int = 2) -> list[dict]:
    """Dialogues from a JSONL file; a clear error naming the line for anything malformed."""
    if not path.is_file():
        raise CalibError(f"{path}: no such calibration file")
    records = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CalibError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("turns"), list) \
                or not rec["turns"]:
            raise CalibError(f'{where}: expected {{"turns": [{{"role", "content"}}, ...]}}')
        for i, turn in enumerate(rec["turns"]):
            if not isinstance(turn, dict) or turn.get("role") not in ROLES \
                    or not isinstance(turn.get("content"), str) or not turn["content"].strip():
                raise CalibError(f"{where}: turn {i} needs role user/assistant and text")
        if "system" in rec and not isinstance(rec["system"], str):
            raise CalibError(f"{where}: system must be a string")
        records.append(rec)
    if len(records) < min_records:
        raise CalibError(f"{path}: {len(records)} dialogue(s); at least {min_records} needed")
    return records


@dataclass
class Sample:
    kind: str
    text: str
    tokens: int
    conversations: int


def _messages(rec: dict, system: str | None) -> list[dict]:
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": t["role"], "content": t["content"]} for t in rec["turns"]]


def render(tokenizer, messages: list[dict]) -> str:
    """The conversation as the model sees it in service: its template, thinking off."""
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=False, enable_thinking=False)


def build(tokenizer, dialogues: list[dict], general: list[dict], persona: str,
          samples: int, seq_len: int, seed: int = 0) -> list[Sample]:
    """`samples` packed texts of >= seq_len tokens in the card's mix."""
    if samples < 1 or seq_len < 16:
        raise CalibError("need --samples >= 1 and --seq-len >= 16")
    counts = {k: int(round(samples * f)) for k, f in MIX.items()}
    counts["persona"] += samples - sum(counts.values())
    rng = random.Random(seed)
    pools = {"persona": [(d, d.get("system") or persona) for d in dialogues],
             "plain": [(d, None) for d in dialogues],
             "general": [(g, g.get("system")) for g in general or dialogues]}
    out = []
    for kind, n in counts.items():
        pool = pools[kind]
        for _ in range(n):
            order = rng.sample(pool, len(pool))
            texts, tokens, used = [], 0, 0
            while tokens < seq_len:
                rec, system = order[used % len(order)]
                used += 1
                text = render(tokenizer, _messages(rec, system))
                texts.append(text)
                tokens += len(tokenizer(text, add_special_tokens=False)["input_ids"])
                if used > 10_000:
                    raise CalibError("calibration dialogues render to no tokens")
            out.append(Sample(kind, "".join(texts), tokens, used))
    rng.shuffle(out)
    return out
