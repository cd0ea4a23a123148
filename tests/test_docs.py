"""The docs a user reads first stay short and hold each measured figure once: the README is
a page, not a lab notebook; PERFORMANCE.md opens with today's numbers, each linking its raw
file; a figure lives in one place (README's headline table or docs/*.md; app/'s comments carry
none: tests/test_architecture.py), and the dated detail lives in docs/log/."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from tests.conftest import ROOT

README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "PERFORMANCE.md"

# A measured figure: a number, or a range or pair of them, followed by a unit.
UNITS = r"(?:\s?(?:ms/token|tokens?/s|ms|min|s|h|GiB|GB|MiB|MB|KiB|kB|%)|x(?![\w-]))"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.])({NUMBER}(?:\s?(?:-|–|/)\s?{NUMBER})*){UNITS}(?![\w/])"
)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
HASH = re.compile(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w/-])")


def figures(text: str) -> set[str]:
    """The figures in a text, written the same way whatever spacing was used."""
    found = set()
    for match in FIGURE.finditer(text):
        found.add(re.sub(r"\s+", "", match.group(0)).replace("–", "-"))
    return found


def headline_table(lines: list[str]) -> tuple[int, int]:
    """The first and last line (exclusive) of the README's one table."""
    starts = [i for i, line in enumerate(lines) if line.startswith("|")]
    assert starts, "README.md has no headline table"
    first = starts[0]
    last = first
    while last < len(lines) and lines[last].startswith("|"):
        last += 1
    assert all(i < last for i in starts), "README.md has more than one table"
    return first, last


def outside_code(lines: list[str]) -> list[tuple[int, str]]:
    """The README's lines that are prose (not inside a fenced block)."""
    prose, fenced = [], False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            prose.append((number, line))
    return prose


def test_the_readme_reads_in_two_minutes():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"
    words = len(re.findall(r"\S+", text))
    assert words <= 1200, f"README.md has {words} words (at most 1,200)"
    first, last = headline_table(lines)
    too_wide = [
        n for n, line in outside_code(lines)
        if len(line) > 100 and not (first < n <= last)
    ]
    assert not too_wide, f"README.md prose lines over 100 characters: {too_wide}"


def test_the_readme_has_figures_only_in_its_headline_table():
    lines = README.read_text().splitlines()
    first, last = headline_table(lines)
    rows = lines[first + 2:last]
    assert 5 <= len(rows) <= 8, f"the headline table has {len(rows)} rows (5-8)"
    names = " ".join(row.split("|")[1].lower() for row in rows)
    for row in ("gpu voice-to-voice", "cpu voice-to-voice", "conversations per gpu"):
        assert row in names, f"the headline table has no '{row}' row"
    outside = [(n, line) for n, line in outside_code(lines) if not (first < n <= last)]
    for n, line in outside:
        assert not figures(line), f"README.md:{n}: a figure outside the table: {line!r}"
        assert not DATE.search(line), f"README.md:{n}: a date: {line!r}"
        assert not HASH.search(line), f"README.md:{n}: a commit hash: {line!r}"


def anchors(path: Path) -> set[str]:
    return set(re.findall(r'<a id="([^"]+)">', path.read_text()))


def test_every_headline_links_an_anchor_in_performance():
    lines = README.read_text().splitlines()
    first, last = headline_table(lines)
    links = re.findall(r"\(docs/PERFORMANCE\.md#([\w-]+)\)", "\n".join(lines[first:last]))
    rows = last - first - 2
    assert len(links) >= rows, "every row of the headline table links to PERFORMANCE.md"
    missing = set(links) - anchors(PERFORMANCE)
    assert not missing, f"anchors the README links that PERFORMANCE.md lacks: {missing}"


def current_numbers() -> list[str]:
    lines = PERFORMANCE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## "))
    assert lines[start].startswith("## Current numbers"), "PERFORMANCE.md opens elsewhere"
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
    )
    return lines[start:end]


def test_performance_opens_with_the_current_numbers():
    section = current_numbers()
    assert PERFORMANCE.read_text().splitlines().index(section[0]) < 12
    rows = [line for line in section if line.startswith("|")][2:]
    assert len(rows) >= 8
    names = " ".join(row.split("|")[1].lower() for row in rows)
    for what in ("gpu voice-to-voice", "conversations per gpu", "cpu voice-to-voice",
                 "end of turn", "interrupt-to-silence", "ms/token"):
        assert what in names, f"no current number for {what}"
    header = section[[i for i, s in enumerate(section) if s.startswith("|")][0]].lower()
    for column in ("machine", "settings", "date", "commit", "command", "raw"):
        assert column in header, f"the current numbers have no {column} column"


def test_every_raw_file_the_current_numbers_link_exists():
    section = "\n".join(current_numbers())
    links = re.findall(r"\]\(((?:bench|log)/[^)#\s]+)\)", section)
    assert links, "the current numbers link no raw file"
    missing = [link for link in links if not (PERFORMANCE.parent / link).exists()]
    assert not missing, f"raw files the current numbers link that are missing: {missing}"


def test_the_raw_files_stay_small_and_indexed():
    bench = ROOT / "docs" / "bench"
    size = sum(p.stat().st_size for p in bench.rglob("*") if p.is_file())
    assert size < 8 * 2**20, f"docs/bench/ holds {size / 2**20:.1f} MiB (under 8)"
    index = (bench / "README.md").read_text()
    for entry in bench.iterdir():
        if entry.name != "README.md":
            assert f"`{entry.name}" in index, f"docs/bench/README.md does not say {entry.name}"


def comments(path: Path) -> str:
    """The comments and docstrings of a Python file."""
    text = path.read_text()
    parts = []
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    previous = tokenize.NEWLINE
    for token in tokens:
        if token.type == tokenize.COMMENT:
            parts.append(token.string)
        elif token.type == tokenize.STRING and previous in (
            tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT
        ):
            parts.append(token.string)
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return "\n".join(parts)


def test_the_headline_figures_are_the_current_numbers():
    lines = README.read_text().splitlines()
    first, last = headline_table(lines)
    headline = figures("\n".join(lines[first:last]))
    assert headline, "the headline table holds no figure"
    stray = headline - figures("\n".join(current_numbers()))
    assert not stray, f"README's headline figures not in PERFORMANCE's current numbers: {stray}"


def test_no_figure_is_written_in_two_places():
    """README's headline table repeats the current numbers by design (checked above); any
    other figure lives in one of docs/*.md (app/'s comments are read too, though they carry
    none)."""
    places: dict[str, str] = {}
    for path in sorted((ROOT / "docs").glob("*.md")):
        places[str(path.relative_to(ROOT))] = path.read_text()
    for path in sorted((ROOT / "app").rglob("*.py")):
        places[str(path.relative_to(ROOT))] = comments(path)
    seen: dict[str, str] = {}
    twice = []
    for place, text in places.items():
        for figure in figures(text):
            if figure in seen and seen[figure] != place:
                twice.append(f"{figure}: {seen[figure]} and {place}")
            seen.setdefault(figure, place)
    assert not twice, "figures written in two places:\n" + "\n".join(twice)


def test_the_figure_reader_reads_figures():
    assert figures("p50 361-452 ms, p90 0.77 / 0.95 s, 0.90x; 1,632 tokens") == {
        "361-452ms", "0.77/0.95s", "0.90x"
    }
    assert not figures("Python 3.12, vLLM 0.24.0, H100, 3 x 544, `--max-num-seqs 32`")
    assert figures("60 %") == {"60%"}
