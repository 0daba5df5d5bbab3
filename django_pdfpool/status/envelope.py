"""The memory envelope: what this process may use (its cgroup's limit, else the machine's
memory), what the pool may take of it (SLOTS x MEMORY_LIMIT), what the server and its
children hold now and what recent jobs peaked at. Read from /proc and /sys, never written."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from ..sandbox.children import recent_peaks

PROC, CGROUP = "/proc", "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError, UnicodeDecodeError), open(path) as file:
        return file.read()
    return None


def memory_allowed(proc: str = PROC, cgroup: str = CGROUP) -> tuple[int, str]:
    """The bytes this process may use and what says so: the least limit of its memory cgroup
    and that cgroup's ancestors (v1 ``memory.limit_in_bytes``, v2 ``memory.max``), or
    MemTotal when that is less or there is none."""
    meminfo = (_read(f"{proc}/meminfo") or "MemTotal: 0 kB").split("MemTotal:")[1]
    allowed, source = int(meminfo.split()[0]) << 10, f"MemTotal in {proc}/meminfo"
    for line in (_read(f"{proc}/self/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            roots, name = [f"{cgroup}/memory"], "memory.limit_in_bytes"
        elif not controllers:  # v2's one hierarchy: alone, or beside v1's (hybrid)
            roots, name = [cgroup, f"{cgroup}/unified"], "memory.max"
        else:
            continue
        while True:  # the cgroup, then each ancestor: the least limit holds
            for root in roots:
                value = (_read(f"{root}{path.rstrip('/')}/{name}") or "max").strip()
                if value.isdigit() and int(value) < allowed:
                    allowed, source = int(value), f"{root}{path.rstrip('/')}/{name}"
            if path in ("/", ""):
                break
            path = os.path.dirname(path)
    return allowed, source


def tree_rss(pid: int, proc: str = PROC) -> tuple[int, int, int]:
    """RSS of ``pid``, the number of processes below it and their RSS summed (pages they
    share, as forked children do with their template, count in each)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        stat = _read(f"{proc}/{entry}/stat") if entry.isdigit() else None
        if stat:  # "pid (name) state ppid ...": the name may hold spaces and ")"
            parents.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(entry))
    below, todo = [], list(parents.get(pid, []))
    while todo:
        below.append(todo.pop())
        todo += parents.get(below[-1], [])
    size = os.sysconf("SC_PAGE_SIZE")

    def rss(of: int) -> int:
        return int((_read(f"{proc}/{of}/statm") or "0 0").split()[1]) * size

    return rss(pid), len(below), sum(map(rss, below))


def envelope(slots: int, memory_limit: int) -> dict[str, Any]:
    """This process's envelope, JSON-ready (the status page's ``memory``)."""
    allowed, source = memory_allowed()
    server, children, children_rss = tree_rss(os.getpid())
    jobs = [vars(peak) for peak in reversed(recent_peaks)]
    return {
        "allowed": allowed,
        "allowed_by": source,
        "pool": slots * memory_limit,
        "server_rss": server,
        "children": children,
        "children_rss": children_rss,
        "fits": slots * memory_limit + server <= allowed,
        "recent_jobs": jobs,
    }
