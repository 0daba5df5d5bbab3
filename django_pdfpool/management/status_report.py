"""``pdfpool status``: the status page's reading (``status_data``) as plain-text tables, with
a note saying whose figures they are (docs/command.md)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from django.core.management.base import CommandError

from ..conf import RedisSettings
from ..status.page import (
    COUNTERS,
    PROCESS_ONLY,
    PROCESS_ONLY_NOTE,
    scope_sentence,
    status_context,
    work_state,
)

FRESH_NOTES = {  # by backend: the command built its pool just now, nothing ran in it
    "local": " That is this command's process, whose pool was built just now: it is empty by "
    "construction, whatever the workers are doing.",
    "redis": " That is this command's process, which ran no job: they are left out.",
}
JOB_COLUMNS = ("STATE", "JOB", "CALLER", "SHARERS", "QUEUED FOR", "RUNNING FOR")
JOB_CELLS = itemgetter(
    "state", "short_key", "caller", "sharers", "queued_for_text", "running_for_text"
)

# Control characters (category Cc), and the bidirectional marks, embeddings, overrides and
# isolates that reorder what a terminal shows (CVE-2021-42574)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(text: str, *, keep: str = "") -> str:
    """``text`` with control characters (but those in ``keep``) and bidirectional controls
    escaped: what a hostile PDF, or a caller's name, says must not drive the terminal."""
    return _UNSAFE.sub(
        lambda m: m[0] if m[0] in keep else m[0].encode("unicode_escape").decode(), text
    )


def check_redis(conf: RedisSettings) -> None:
    """CommandError unless the pool's Redis (through its Sentinels, if set) answers a PING: a
    pool that cannot reach Redis reads its own process instead, which would pass for an idle
    cluster."""
    import redis

    from ..admission.redis.link import connect
    from ..admission.redis.urls import presentable

    client = connect(conf.url, conf.sentinels, conf.timeout)
    try:
        with client:
            client.ping()
    except redis.RedisError as error:
        raise CommandError(
            f"Redis at {presentable(conf.url)} does not answer ({type(error).__name__}): "
            "the cluster's state cannot be read."
        ) from None


def annotate(data: dict[str, Any], *, fresh: bool) -> dict[str, Any]:
    """``status_data()`` with ``fresh`` (the command built the pool: nothing ran in it) and
    the status page's ``note`` saying whose figures these are."""
    note = scope_sentence(data)
    if fresh and data["scope"] != "cluster":
        note += FRESH_NOTES[data["backend"]]
    return {**data, "fresh": fresh, "note": note}


def status_text(data: dict[str, Any]) -> str:
    """The annotated reading as plain text: a heading, the note, then tables, from the rows
    of the status page."""
    rows, cluster, sandbox = status_context(data, dash="-"), data["cluster"], data["sandbox"]
    if cluster is None:
        title = f"PDF pool of process {data['pid']} on {data['host']} (backend local)"
    else:
        title = (
            f"PDF pool in Redis: namespace {cluster['namespace']} at {cluster['url']}, "
            f"mode {cluster['mode']}, read by process {data['pid']} on {data['host']}"
        )
    pool = [
        ("Running", f"{data['running']} of {data['slots']} slots"),
        ("Queued", f"{data['queued']} of {data['queue']} places"),
        ("State", work_state(data)[0]),
    ]
    jobs = [
        JOB_CELLS({**job, "caller": job["caller_name"] or job["caller"]}) for job in rows["jobs"]
    ]
    blocks = [
        [safe(title), "", *textwrap.wrap(data["note"], 92)],
        _table(["SETTING", "VALUE"], [(label, text) for label, _, _, text in rows["config"]]),
        _table(["POOL", "NOW"], pool),
        _listing("Jobs in flight", JOB_COLUMNS, jobs),
    ]
    if cluster is not None and cluster["mode"] == "redis":
        holds = [
            [
                hold["process"],
                hold["pid"],
                hold["lease_text"],
                len(hold["running"]),
                len(hold["queued"]),
                hold["waiting"],
            ]
            for hold in rows["holds"]
        ]
        header = ["PROCESS", "PID", "LEASE LEFT", "RUNNING", "QUEUED", "WAITING"]
        blocks.append(_listing("Processes holding or waiting on something", header, holds))
    refusing = " (not met: extractions are refused)" if sandbox["refusing"] else ""
    memory = rows["memory"]
    envelope = [(label, text, note[2]) for label, _, _, text, note in memory["rows"]]
    peaks = [(f"{ended:%H:%M:%S}", peak, start) for ended, peak, start in memory["jobs"]]
    blocks += [
        [
            f"Extraction sandbox on this host: level {sandbox['level']}, required "
            f"{sandbox['required']}{refusing}, Landlock ABI {sandbox['landlock_abi']}.",
            *_table(["LAYER", "STATE"], list(sandbox["layers"].items())),
        ],
        [f"Memory envelope of process {data['pid']}:", *_table(["", "VALUE", ""], envelope)],
        _listing("Recent jobs' peak RSS", ["ENDED", "PEAK RSS", "CHILD"], peaks),
    ]
    if not data["fresh"] or data["scope"] == "cluster":
        books = data["scope"] == "cluster"
        whose = "the cluster" if books else f"process {data['pid']}"
        counters = [  # no cluster-wide figure for what each process counts alone
            (label, "-", what + PROCESS_ONLY_NOTE)
            if books and field in PROCESS_ONLY
            else (label, data["counters"][field], what)
            for label, field, what in COUNTERS
        ]
        blocks.append([f"Counters of {whose}:", *_table(["EVENT", "COUNT", "WHAT"], counters)])
        columns = ["", *(label.upper() for label in rows["figure_columns"])]
        figures = [(label, *(text for _, _, text in cells)) for label, cells in rows["figures"]]
        blocks.append([f"Recent jobs of {whose}:", *_table(columns, figures)])
    return safe("\n\n".join("\n".join(block) for block in blocks), keep="\n") + "\n"


def _listing(name: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """``name (n):`` over a table of the rows, or ``name: none.``"""
    return [f"{name} ({len(rows)}):", *_table(header, rows)] if rows else [f"{name}: none."]


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned columns two spaces apart, under a header row."""
    cells = [[safe(str(cell)) for cell in row] for row in [header, *rows]]  # one line each
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(map(str.ljust, row, widths)).rstrip() for row in cells]
