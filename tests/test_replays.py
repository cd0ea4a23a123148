"""Real conversations, recorded with `--record-events` (the page and its socket, real VAD,
ASR, model and TTS), replayed through today's `app.core.floor.step`: each voiced stretch gets
the outcome labelled by hand in tests/replays/labels.json from what the user said
("turn", "continues": it goes on from the turn before, "let": no turn; "a/b": either).
The recorded commands are not compared: only what the user did is replayed."""

from __future__ import annotations

import json

import pytest

from app.core import eventlog
from tests.conftest import ROOT

REPLAYS = ROOT / "tests" / "replays"
LABELS = json.loads((REPLAYS / "labels.json").read_text())


def test_there_are_ten_labelled_conversations_at_least():
    assert len(LABELS) >= 10
    assert {p.name.removesuffix(".jsonl.gz") for p in REPLAYS.glob("*.jsonl.gz")} == set(LABELS)
    for label in LABELS.values():
        assert len(label["said"]) == len(label["expect"])


@pytest.mark.parametrize("name", sorted(LABELS))
def test_a_recorded_conversation_replays_as_labelled(name):
    label = LABELS[name]
    got = [o.split(":")[0] for o in
           eventlog.replay(eventlog.read(REPLAYS / f"{name}.jsonl.gz")).outcomes]
    wrong = [(i, said, want, have) for i, (said, want, have)
             in enumerate(zip(label["said"], label["expect"], got, strict=False))
             if have not in want.split("/")]
    assert len(got) == len(label["expect"]) and not wrong, (got, wrong)
