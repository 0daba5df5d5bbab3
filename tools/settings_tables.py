"""Write docs/settings.md's tables from the settings declaration (``django_pdfpool.conf``).

    python tools/settings_tables.py          # rewrite the tables in docs/settings.md
    python tools/settings_tables.py --check  # exit 1 if they differ from the declaration

Each table sits between ``<!-- settings: NAME -->`` (``PDFPOOL``, or a nested dict: ``DOOR``,
``REDIS``, ``SANDBOX``) and ``<!-- /settings -->``: key, default, what the check requires, and
the help, so the page read in the repository and the built site say what the code declares.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "settings.md"
TABLE = re.compile(r"^<!-- settings: (?P<name>[A-Z]+) -->\n(?:\|.*\n)*<!-- /settings -->$", re.M)


def default_shown(value: Any) -> str:
    """A default as a reader writes it: ``"pypdf"``, ``None``, ``512 MiB``."""
    from django_pdfpool.bounds import MiB, is_int, shown

    if is_int(value) and value >= MiB:
        return shown(value)
    return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"


def settings_table(name: str) -> str:
    """The Markdown table of the keys of PDFPOOL or of its nested dict ``name``."""
    from django_pdfpool.conf import SETTINGS, table_of

    tables = {"PDFPOOL": SETTINGS} | {
        key: table_of(declared.group) for key, declared in SETTINGS.items() if declared.group
    }
    if name not in tables:
        raise ValueError(f"no settings table {name!r}; the tables are {list(tables)}")
    rows = ["| key | default | must be | meaning |", "|-----|---------|---------|---------|"]
    for key, declared in tables[name].items():
        rows.append(
            f"| `{key}` | {default_shown(declared.default)} | {declared.check.expected} "
            f"| {declared.help} |"
        )
    return "\n".join(rows)


def render(markdown: str) -> str:
    """``markdown`` with each table between its markers made anew."""

    def table(found: re.Match[str]) -> str:
        name = found["name"]
        return f"<!-- settings: {name} -->\n{settings_table(name)}\n<!-- /settings -->"

    return TABLE.sub(table, markdown)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    written = PAGE.read_text(encoding="utf-8")
    made = render(written)
    if "--check" in argv:
        if made != written:
            print(f"{PAGE} differs from django_pdfpool.conf: run tools/settings_tables.py")
            return 1
        return 0
    PAGE.write_text(made, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
