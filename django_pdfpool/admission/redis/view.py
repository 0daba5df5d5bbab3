"""The status page's reading of a Redis pool: ``view.lua``'s reply as the jobs in flight, one
``ProcessHold`` per process, and the cluster's books (counters and durations kept in Redis)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..ledger import Counter, Counters, DurationSummary, JobInfo, PoolSnapshot, ProcessHold


@dataclass(frozen=True)
class ClusterReading:
    """A parsed ``view.lua`` reply; times in seconds on the Redis clock, but ``since``."""

    jobs: tuple[JobInfo, ...]
    processes: tuple[ProcessHold, ...]
    counters: Counters = field(default_factory=Counters)  # every process's, counted in Redis
    queue_wait: DurationSummary = field(default_factory=DurationSummary)  # recent jobs'
    run_time: DurationSummary = field(default_factory=DurationSummary)
    since: float | None = None  # wall clock: when Redis began counting; None: not yet

    def with_books(self, snapshot: PoolSnapshot) -> PoolSnapshot:
        """``snapshot`` with the cluster's counters and figures instead of its own."""
        return dataclasses.replace(
            snapshot,
            counters=self.counters,
            queue_wait=self.queue_wait,
            run_time=self.run_time,
            scope="cluster",
            counted_since=self.since,
        )


def parse_view(reply: Any, wall: float) -> ClusterReading:
    """Read ``view.lua``'s reply: ages on Redis's clock, dates on ``wall`` (this host's); a
    field that is not what the scripts write (bad data) is skipped, never an error."""
    now = int(reply[0]) / 1000
    leases = reply[1]
    flat = reply[2]
    jobs: list[JobInfo] = []
    owners: dict[str, str] = {}
    waits: dict[str, int] = {}
    for i in range(0, len(flat) - 1, 2):
        key, pairs = flat[i], flat[i + 1]
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
    for i in range(0, len(leases) - 1, 2):
        with contextlib.suppress(ValueError, OverflowError):
            ends[leases[i]] = int(float(leases[i + 1])) / 1000
    for process in sorted(set(ends) | set(owners.values()) | set(waits)):
        host, _, rest = process.partition(":")
        pid = rest.partition(":")[0]
        mine = [job for job in jobs if owners[job.key] == process]
        holders.append(
            ProcessHold(
                process=process,
                host=host,
                pid=int(pid) if pid.isdigit() else 0,
                lease_left=ends.get(process, now) - now,
                running=tuple(job.key for job in mine if job.state == "running"),
                queued=tuple(job.key for job in mine if job.state == "queued"),
                waiting=waits.get(process, 0),
            )
        )
    books = _books(reply[3:], now, wall) if len(reply) > 3 else {}
    return ClusterReading(jobs=tuple(jobs), processes=tuple(holders), **books)


def whole(value: Any) -> int | None:
    """A count or a time (ms) as the scripts store it, or None for anything else."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _books(reply: Any, now: float, wall: float) -> dict[str, Any]:
    """The cluster's books from ``view.lua``: the ``stats`` hash, then the queue waits
    and run times in ms (values that are not whole numbers skipped)."""
    flat, waits, runs = reply
    stats = {
        flat[i]: n for i in range(0, len(flat) - 1, 2) if (n := whole(flat[i + 1])) is not None
    }
    since = stats.get("since")
    return {
        "counters": Counters(**{c.value: n for c in Counter if (n := stats.get(c, -1)) >= 0}),
        "queue_wait": DurationSummary.of(ms / 1000 for ms in map(whole, waits) if ms is not None),
        "run_time": DurationSummary.of(ms / 1000 for ms in map(whole, runs) if ms is not None),
        "since": None if since is None else wall - (now - since / 1000),
    }
