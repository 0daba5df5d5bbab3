"""``pdfpool status``: one reading of the pool (the status page's JSON, ``status_data``) as
JSON or as plain-text tables, saying whose figures they are (docs/command.md)."""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError

from ..conf import RedisSettings
from ..status.page import CONFIG, COUNTERS, DURATION_ROWS, DURATIONS, fmt

LOCAL_NOTE = (
    "With the local backend each worker process keeps its own pool in its own memory: "
    "these are the figures of process {pid} only.{fresh} A worker's own figures are on its "
    "status page; a REDIS setting makes the workers one pool, which this command can read."
)
FRESH_NOTE = (
    " That is this command's process, whose pool was built just now: it is empty by "
    "construction, whatever the workers are doing."
)
REDIS_NOTE = (
    "Slots, queue, running, queued, jobs and processes are cluster-wide, read from Redis. "
    "Counters and durations are process {pid}'s only.{fresh}"
)
REDIS_FRESH_NOTE = " That is this command's process, which ran no job: they are left out."
REDIS_BOOKS_NOTE = (
    "Every figure below is cluster-wide, read from Redis: slots, queue, running, queued, "
    "jobs, processes, counters and recent-job figures (every process sharing the namespace)."
)


def check_redis(conf: RedisSettings) -> None:
    """CommandError unless the pool's Redis answers a PING: a pool that cannot reach Redis
    reads its own process instead, which would pass for an idle cluster."""
    import redis

    from ..admission.redis.urls import presentable

    client = redis.Redis.from_url(
        conf.url, socket_timeout=conf.timeout, socket_connect_timeout=conf.timeout
    )
    try:
        client.ping()
    except redis.RedisError as error:
        where = presentable(conf.url)
        raise CommandError(
            f"Redis at {where} does not answer ({type(error).__name__}): "
            "the cluster's state cannot be read."
        ) from None
    finally:
        client.close()


def annotate(data: dict[str, Any], *, fresh: bool) -> dict[str, Any]:
    """``data`` (``status_data()``) with ``fresh`` (the command built the pool: nothing ran
    in it) and a ``note`` saying whose figures these are."""
    cluster = data.get("cluster")
    books = data.get("scope") == "cluster"  # counters and durations kept in Redis
    if cluster is None:
        note = LOCAL_NOTE.format(pid=data["pid"], fresh=FRESH_NOTE if fresh else "")
    elif cluster["mode"] != "redis":
        note = (
            f"Redis is failing (mode {cluster['mode']}): every figure below is process "
            f"{data['pid']}'s own, not the cluster's."
        )
    elif books:
        note = REDIS_BOOKS_NOTE
    else:
        note = REDIS_NOTE.format(pid=data["pid"], fresh=REDIS_FRESH_NOTE if fresh else "")
    return {
        **data,
        "host": data.get("host") or socket.gethostname(),
        "scope": data.get("scope") or "process",
        "fresh": fresh,
        "note": note,
    }


def render(data: dict[str, Any]) -> str:
    """The annotated reading as plain text: a heading, the note, then tables."""
    cluster = data.get("cluster")
    if cluster is None:
        title = f"PDF pool of process {data['pid']} on {data['host']} (backend local)"
    else:
        title = (
            f"PDF pool in Redis: namespace {cluster['namespace']} at {cluster['url']}, "
            f"mode {cluster['mode']}, read by process {data['pid']} on {data['host']}"
        )
    lines = [title, "", *_wrap(data["note"]), ""]
    settings = [(label, fmt(data[field], kind)) for label, field, kind in CONFIG]
    lines += _table(["SETTING", "VALUE"], settings)
    lines.append("")
    state = "closed (draining or stopped)" if data["closed"] else "accepting"
    lines += _table(
        ["POOL", "NOW"],
        [
            ("Running", f"{data['running']} of {data['slots']} slots"),
            ("Queued", f"{data['queued']} of {data['queue']} places"),
            ("State", state),
        ],
    )
    lines += ["", *_jobs(data["jobs"])]
    if cluster is not None and cluster["mode"] == "redis":
        lines += ["", *_processes(cluster)]
    if data.get("sandbox"):
        lines += ["", *_sandbox(data["sandbox"])]
    if not data["fresh"] or data["scope"] == "cluster":
        lines += ["", *_counters(data)]
    return "\n".join(lines) + "\n"


def _sandbox(sandbox: dict[str, Any]) -> list[str]:
    refusing = " (not met: extractions are refused)" if sandbox["refusing"] else ""
    head = (
        f"Extraction sandbox on this host: level {sandbox['level']}, required "
        f"{sandbox['required']}{refusing}, Landlock ABI {sandbox['landlock_abi']}."
    )
    return [head, *_table(["LAYER", "STATE"], list(sandbox["layers"].items()))]


def _jobs(jobs: list[dict[str, Any]]) -> list[str]:
    if not jobs:
        return ["Jobs in flight: none."]
    rows = [
        (
            job["state"],
            job["short_key"],
            job.get("caller_name") or job["caller"],
            str(job["sharers"]),
            fmt(job["queued_for"], "seconds"),
            fmt(job["running_for"], "seconds") if job["started_at"] else "-",
        )
        for job in jobs
    ]
    header = ["STATE", "JOB", "CALLER", "SHARERS", "QUEUED FOR", "RUNNING FOR"]
    return [f"Jobs in flight ({len(jobs)}):", *_table(header, rows)]


def _processes(cluster: dict[str, Any]) -> list[str]:
    holds = cluster["processes"]
    if not holds:
        return ["Processes holding or waiting on something: none."]
    rows = [
        (
            hold["process"],
            str(hold["pid"]),
            f"{hold['lease_left']:.1f} s",
            str(len(hold["running"])),
            str(len(hold["queued"])),
            str(hold["waiting"]),
        )
        for hold in holds
    ]
    header = ["PROCESS", "PID", "LEASE LEFT", "RUNNING", "QUEUED", "WAITING"]
    return [f"Processes holding or waiting on something ({len(holds)}):", *_table(header, rows)]


def _counters(data: dict[str, Any]) -> list[str]:
    whose = "the cluster" if data["scope"] == "cluster" else f"process {data['pid']}"
    rows = [(label, str(data["counters"][field]), help) for label, field, help in COUNTERS]
    lines = [f"Counters of {whose}:", *_table(["EVENT", "COUNT", "WHAT"], rows)]
    columns = [label.upper() for label, _ in DURATIONS]
    figures = [
        (label, *(_figure(data[field], stat, kind) for _, field in DURATIONS))
        for label, stat, kind in DURATION_ROWS
    ]
    return [*lines, "", f"Recent jobs of {whose}:", *_table(["", *columns], figures)]


def _figure(summary: dict[str, Any], stat: str, kind: str) -> str:
    if kind == "int":
        return str(summary[stat])
    return fmt(summary[stat], "seconds") if summary["count"] else "-"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, under a header row."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _wrap(text: str, width: int = 92) -> list[str]:
    return textwrap.wrap(text, width)
