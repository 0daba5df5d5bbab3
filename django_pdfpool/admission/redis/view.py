"""The status page's reading of a Redis-coordinated pool: ``view.lua``'s reply parsed into
the jobs in flight in every process, one ``ProcessHold`` per process, and the cluster's
books (the counters and recent durations the scripts keep in Redis)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..snapshot import Counters, DurationSummary, JobInfo, PoolSnapshot, ProcessHold

_COUNTERS = frozenset(each.name for each in dataclasses.fields(Counters))


@dataclass(frozen=True)
class View:
    """A parsed ``view.lua`` reply; times in seconds on the Redis clock, but ``since``."""

    now: float
    jobs: tuple[JobInfo, ...]
    owners: dict[str, str]  # job key -> owning process
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


def parse_view(reply: Any, wall: float) -> View:
    """Read ``view.lua``'s reply; ``wall`` (this host's clock) dates the jobs,
    so that ages come from one clock (Redis's) and dates from the reader's."""
    now = int(reply[0]) / 1000
    leases = reply[1]
    flat = reply[2]
    jobs: list[JobInfo] = []
    owners: dict[str, str] = {}
    waits: dict[str, int] = {}
    for i in range(0, len(flat), 2):
        key, pairs = flat[i], flat[i + 1]
        fields = dict(zip(pairs[::2], pairs[1::2], strict=True))
        if not fields:
            continue
        running = fields.get("state") == "running" and "st" in fields
        started = int(fields["st"]) / 1000 if running else None
        sharers = 0
        for name, value in fields.items():
            if name.startswith("w:"):
                sharers += int(value)
                waits[name[2:]] = waits.get(name[2:], 0) + int(value)
        queued = int(fields.get("qt", 0)) / 1000
        caller = fields.get("caller", "")
        jobs.append(JobInfo.at(key, caller, sharers, queued, started, now, wall))
        owners[key] = fields.get("owner", "")
    holders: list[ProcessHold] = []
    ends = {leases[i]: int(float(leases[i + 1])) / 1000 for i in range(0, len(leases), 2)}
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
    return View(now=now, jobs=tuple(jobs), owners=owners, processes=tuple(holders), **books)


def _books(reply: Any, now: float, wall: float) -> dict[str, Any]:
    """The cluster's books from ``view.lua``: the ``stats`` hash, then the queue waits
    and run times in ms."""
    flat, waits, runs = reply
    stats = {flat[i]: int(flat[i + 1]) for i in range(0, len(flat), 2)}
    since = stats.get("since")
    return {
        "counters": Counters(**{name: n for name, n in stats.items() if name in _COUNTERS}),
        "queue_wait": DurationSummary.of(int(ms) / 1000 for ms in waits),
        "run_time": DurationSummary.of(int(ms) / 1000 for ms in runs),
        "since": None if since is None else wall - (now - since / 1000),
    }
