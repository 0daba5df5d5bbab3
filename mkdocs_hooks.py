"""mkdocs hooks: the settings page's tables, made from the settings table at build time.

A line ``<!-- settings: SECTION -->`` in a page becomes the table of that section's PDFPOOL
keys (``django_pdfpool.conf.SETTINGS``): key, default, what the check requires, and the
help. So docs/settings.md can never disagree with the code (tests/test_conf.py).
"""

from __future__ import annotations

import re
from typing import Any

from django_pdfpool.bounds import MiB, is_int, shown
from django_pdfpool.conf import SECTIONS, SETTINGS

MARKER = re.compile(r"^<!-- settings: (?P<section>[a-z]+) -->$", re.M)


def default_shown(value: Any) -> str:
    """A default as a reader writes it: ``"pypdf"``, ``None``, ``512 MiB``."""
    if is_int(value) and value >= MiB:
        return shown(value)
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def settings_table(section: str) -> str:
    """The Markdown table of the keys of ``section``, in the table's order."""
    if section not in SECTIONS:
        raise ValueError(f"no settings section {section!r}; the sections are {SECTIONS}")
    rows = [
        "| key | default | must be | meaning |",
        "|-----|---------|---------|---------|",
    ]
    rows += [
        f"| `{key}` | {default_shown(declared.default)} | {declared.check.expected} "
        f"| {declared.help} |"
        for key, declared in SETTINGS.items()
        if declared.section == section
    ]
    return "\n".join(rows)


def render(markdown: str) -> str:
    """``markdown`` with each settings marker replaced by its table."""
    return MARKER.sub(lambda found: settings_table(found["section"]), markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
