"""docs/ARCHITECTURE.md is true: its state table is `app.core.floor.TABLE`, its threads exist,
and the turn-taking state has one writer (`app.core.floor.step`)."""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest

from app.core.floor import TABLE
from app.core.floor_types import Floor
from tests.conftest import ROOT

DOC = ROOT / "docs" / "ARCHITECTURE.md"


def test_the_architecture_page_is_short():
    assert len(DOC.read_text().splitlines()) <= 130


def test_its_state_table_is_the_code_s():
    rows = re.findall(r"^\| (\w[\w ]*?) \| ([\w ]+?) \| (.+?) \|$", DOC.read_text(), re.M)
    table = {(u, e): what for u, e, what in rows if u not in ("utterance", "thread", "file")}
    assert table == TABLE


def test_the_threads_it_names_are_started_by_the_app():
    text = DOC.read_text()
    section = text[text.index("## Threads"):text.index("- `Floor`")]
    names = re.findall(r"^\| `([a-z-]+)`", section, re.M)
    code = "".join(p.read_text() for p in (ROOT / "app").rglob("*.py"))
    assert len(names) >= 5
    for name in names:
        assert re.search(rf'name=f?"{re.escape(name)}', code), name


def _writes_of_the_floor(path) -> list[str]:
    """Places in one module that make a new Floor or set a Seat's state."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            first = ast.unparse(node.args[0]) if node.args else ""
            if func == "Floor" or func.endswith("replace") and re.search(
                    r"\bf\b|state|floor", first):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)[:60]}")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(sub, ast.Attribute) and sub.attr == "state" \
                            and "app" not in ast.unparse(sub.value):  # Starlette's app.state
                        found.append(f"{path.name}:{node.lineno} {ast.unparse(node)[:60]}")
    return found


def test_only_step_writes_the_floor():
    """No module but app/core/floor.py makes a Floor; the owner only stores what `step`
    returned (`Conversation._apply`)."""
    writes = {p.name: _writes_of_the_floor(p) for p in (ROOT / "app").rglob("*.py")
              if p.name != "floor.py"}
    owner = writes.pop("conversation.py")
    assert owner == [w for w in owner if "step(self.rules, seat.state" in w] and len(owner) == 1
    assert not any(writes.values()), writes


def test_the_floor_cannot_be_changed_in_place():
    from app.core.anchor import AnchorQueue
    from app.core.conversation import Seat

    with pytest.raises(dataclasses.FrozenInstanceError):
        Floor().speaking = 3  # type: ignore[misc]
    seat = Seat(AnchorQueue.__new__(AnchorQueue))
    with pytest.raises(AttributeError, match="only app.core.floor.step"):
        seat.speaking = 3
