"""mkdocs hooks: a line ``<!-- settings: PDFPOOL -->`` (DOOR, REDIS, SANDBOX) in a page becomes
the table of those keys, made from ``django_pdfpool.conf``: key, default, what the check
requires, and the help; so docs/settings.md cannot disagree with the code."""

from __future__ import annotations

import re
from typing import Any

from django_pdfpool.bounds import MiB, is_int, shown
from django_pdfpool.conf import SETTINGS, table_of

MARKER = re.compile(r"^<!-- settings: (?P<table>[A-Z]+) -->$", re.M)
TABLES = {"PDFPOOL": SETTINGS} | {
    key: table_of(declared.group) for key, declared in SETTINGS.items() if declared.group
}


def default_shown(value: Any) -> str:
    """A default as a reader writes it: ``"pypdf"``, ``None``, ``512 MiB``."""
    if is_int(value) and value >= MiB:
        return shown(value)
    return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"


def settings_table(name: str) -> str:
    """The Markdown table of the keys of PDFPOOL or of its nested dict ``name``."""
    if name not in TABLES:
        raise ValueError(f"no settings table {name!r}; the tables are {list(TABLES)}")
    rows = ["| key | default | must be | meaning |", "|-----|---------|---------|---------|"]
    for key, declared in TABLES[name].items():
        rows.append(
            f"| `{key}` | {default_shown(declared.default)} | {declared.check.expected} "
            f"| {declared.help} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)


def render(markdown: str) -> str:
    """``markdown`` with each settings marker replaced by its table."""
    return MARKER.sub(lambda found: settings_table(found["table"]), markdown)
