"""The status page's reading of a Redis-coordinated pool: ``view.lua``'s reply parsed into
the jobs in flight in every process and one ``ProcessHold`` per process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..snapshot import JobInfo, ProcessHold


@dataclass(frozen=True)
class View:
    """A parsed ``view.lua`` reply; times in seconds on the Redis clock."""

    now: float
    jobs: tuple[JobInfo, ...]
    owners: dict[str, str]  # job key -> owning process
    processes: tuple[ProcessHold, ...]


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
    return View(now=now, jobs=tuple(jobs), owners=owners, processes=tuple(holders))
