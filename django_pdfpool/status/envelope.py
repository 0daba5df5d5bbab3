"""The memory envelope: what this process may use (its cgroup's limit, else the machine's
memory), what the pool may take of it (SLOTS x MEMORY_LIMIT), what the server and its
children hold now and what recent jobs peaked at. Read from /proc and /sys, never written."""

from __future__ import annotations

import contextlib
import os
from pathlib import PurePosixPath
from typing import Any

from ..sandbox.children import recent_peaks

PROC, CGROUP = "/proc", "/sys/fs/cgroup"
JOB_FIELDS = ("ended", "peak_rss", "start")  # of each recent job (children.recent_peaks)


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError, UnicodeDecodeError), open(path) as file:
        return file.read()
    return None


def memory_allowed(proc: str = PROC, cgroup: str = CGROUP) -> tuple[int, str]:
    """The bytes this process may use and what says so: the least limit of its memory cgroup
    and that cgroup's ancestors (v1 ``memory.limit_in_bytes``, v2 ``memory.max``), or
    MemTotal when that is less or there is none; ``(0, "unknown")`` without ``/proc``."""
    meminfo = _read(f"{proc}/meminfo")
    if meminfo is None or "MemTotal:" not in meminfo:
        return 0, "unknown"  # not Linux: nothing to hold the pool to
    allowed = int(meminfo.split("MemTotal:")[1].split()[0]) << 10
    source = f"MemTotal in {proc}/meminfo"
    for line in (_read(f"{proc}/self/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            root, name = f"{cgroup}/memory", "memory.limit_in_bytes"
        elif not controllers:  # v2 (beside v1, as on a hybrid host, it has no memory.max)
            root, name = cgroup, "memory.max"
        else:
            continue
        for directory in (path, *map(str, PurePosixPath(path).parents)):  # the least holds
            file = f"{root}{directory.rstrip('/')}/{name}"
            value = (_read(file) or "max").strip()
            if value.isdigit() and int(value) < allowed:
                allowed, source = int(value), file
    return allowed, source


def tree_rss(pid: int, proc: str = PROC) -> tuple[int, int, int]:
    """RSS of ``pid``, the number of processes below it and their RSS summed (pages they
    share, as forked children do with their template, count in each)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir(proc)
    except OSError:  # not Linux
        return 0, 0, 0
    for entry in filter(str.isdigit, entries):  # "pid (name) state ppid": the name
        stat = (_read(f"{proc}/{entry}/stat") or ") - 0").rpartition(")")[2]  # may hold ")"
        children.setdefault(int(stat.split()[1]), []).append(int(entry))
    below, todo = [], list(children.get(pid, []))
    while todo:
        below.append(todo.pop())
        todo += children.get(below[-1], [])
    page = os.sysconf("SC_PAGE_SIZE")
    rss = [int((_read(f"{proc}/{p}/statm") or "0 0").split()[1]) * page for p in [pid, *below]]
    return rss[0], len(below), sum(rss[1:])


def envelope(slots: int, memory_limit: int) -> dict[str, Any]:
    """This process's envelope, JSON-ready (the status page's ``memory``)."""
    (allowed, source), (server, children, children_rss) = memory_allowed(), tree_rss(os.getpid())
    jobs = list(recent_peaks)  # copied in one step: job threads append while we read
    return {
        "allowed": allowed, "allowed_by": source, "pool": slots * memory_limit,
        "server_rss": server, "children": children, "children_rss": children_rss,
        "fits": not allowed or slots * memory_limit + server <= allowed,
        "recent_jobs": [dict(zip(JOB_FIELDS, job, strict=True)) for job in reversed(jobs)],
    }  # fmt: skip
