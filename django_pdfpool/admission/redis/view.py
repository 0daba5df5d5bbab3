"""The status page's reading of a Redis pool: ``view.lua``'s reply as the jobs in flight, one
``ProcessHold`` per process, and the cluster's books (counters and durations kept in Redis)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ..ledger import Counter, Counters, DurationSummary, JobInfo, PoolSnapshot, ProcessHold


def parse_view(
    reply: Any, snapshot: Callable[[list[JobInfo]], PoolSnapshot]
) -> tuple[PoolSnapshot, tuple[ProcessHold, ...]]:
    """``snapshot(jobs)`` with the cluster's books, and who holds what; a field that is not
    what the scripts write (bad data) is skipped, never an error."""
    now, leases, flat, stats_flat, waits_ms, runs_ms = reply
    now, wall = int(now) / 1000, time.time()
    jobs: list[JobInfo] = []
    owners: dict[str, str] = {}
    waits: dict[str, int] = {}
    for key, pairs in zip(flat[::2], flat[1::2], strict=False):
        fields = dict(zip(pairs[::2], pairs[1::2], strict=False))
        queued_ms = whole(fields.get("qt"))
        if queued_ms is None or key in owners:
            continue  # not a job as the scripts write one (or listed twice)
        started_ms = whole(fields.get("st")) if fields.get("state") == "running" else None
        sharers = 0
        for name, value in fields.items():
            count = whole(value)
            if name.startswith("w:") and count is not None and count > 0:
                sharers += count
                waits[name[2:]] = waits.get(name[2:], 0) + count
        started = None if started_ms is None else started_ms / 1000
        caller = fields.get("caller", "")
        jobs.append(JobInfo.at(key, caller, sharers, queued_ms / 1000, started, now, wall))
        owners[key] = fields.get("owner", "")
    holders: list[ProcessHold] = []
    ends: dict[str, float] = {}
    for who, end in zip(leases[::2], leases[1::2], strict=False):
        with contextlib.suppress(ValueError, OverflowError):
            ends[who] = int(float(end)) / 1000
    for process in sorted(set(ends) | set(owners.values()) | set(waits)):
        host, pid, *_ = [*process.split(":"), ""]
        mine = [job for job in jobs if owners[job.key] == process]
        holders.append(
            ProcessHold(
                process=process,
                host=host,
                pid=int(pid) if pid.isascii() and pid.isdigit() else 0,  # not int("²")
                lease_left=ends.get(process, now) - now,
                running=tuple(job.key for job in mine if job.state == "running"),
                queued=tuple(job.key for job in mine if job.state == "queued"),
                waiting=waits.get(process, 0),
            )
        )
    pairs = zip(stats_flat[::2], stats_flat[1::2], strict=False)
    stats = {name: n for name, value in pairs if (n := whole(value)) is not None}
    since = stats.get("since")
    books = dataclasses.replace(
        snapshot(jobs),
        counters=Counters(**{c.value: n for c in Counter if (n := stats.get(c, -1)) >= 0}),
        queue_wait=DurationSummary.of(ms / 1000 for ms in map(whole, waits_ms) if ms is not None),
        run_time=DurationSummary.of(ms / 1000 for ms in map(whole, runs_ms) if ms is not None),
        scope="cluster",
        counted_since=None if since is None else wall - (now - since / 1000),  # wall clock
    )
    return books, tuple(holders)


def whole(value: Any) -> int | None:
    """A count or a time (ms) as the scripts store it, or None for anything else."""
    if isinstance(value, str | int) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return int(value)
    return None
