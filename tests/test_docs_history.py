"""No line of the repository cites an issue, a round or a session of work: a comment, a
docstring or a page says why in the code's own terms, and git keeps the history. URLs are
left alone (another project's issue tracker may be cited)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEARCHED = [
    "README.md",
    "docs",
    "django_pdfpool",
    "tests",
    "benchmarks",
    "tools",
    "example_project",
]
TEXT = {".py", ".md", ".html", ".txt", ".yml", ".yaml", ".toml", ".js", ".css", ".lua", ".svg"}
HISTORY = re.compile(r"\b(issue|round|session)[ _-]?#?[0-9]", re.I)
URL = re.compile(r"https?://\S+")


def citations(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line that cites a piece of history outside a URL."""
    return [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if HISTORY.search(URL.sub("", line))
    ]


def searched_files() -> list[Path]:
    """Every text file searched, but this one: its lists must name what they look for."""
    found = []
    for name in SEARCHED:
        path = ROOT / name
        found += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [
        p
        for p in found
        if p.suffix in TEXT and "__pycache__" not in p.parts and p != Path(__file__).resolve()
    ]


def test_no_line_cites_an_issue_a_round_or_a_session():
    found = []
    for path in searched_files():
        relative = path.relative_to(ROOT).as_posix()
        if HISTORY.search(relative):
            found.append(f"{relative}: the file's name")
        for number, line in citations(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{relative}:{number}: {line.strip()[:100]}")
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "# the queue's timer (issue" + " 24)",  # in two pieces: this file cites nothing
        "see round 3 of the profile",
        "anchor performance.md#session-8-the-loop",
        '"""Before issue' + ' #7 the pool..."""',
    ],
)
def test_the_check_catches_a_citation(line):
    assert citations(line)


@pytest.mark.parametrize(
    "line",
    [
        "about 20 ms, around 2 jobs at once",
        "see https://github.com/encode/uvicorn/issues/2133 for the timer",
        "a session cookie; sessions 0",
    ],
)
def test_the_check_leaves_other_text_alone(line):
    assert not citations(line)
