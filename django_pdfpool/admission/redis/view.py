"""What a status page reads from a ``RedisPool``: the cluster, each process, this one.

``ClusterSnapshot`` holds two ``PoolSnapshot``s, ``cluster`` (every job in flight
in every process of the namespace, from Redis) and ``local`` (the jobs this
process runs or queues), plus one ``ProcessHold`` per process that holds or
waits on something, and the pool's ``mode``. Counters and duration figures are
this process's in both snapshots: processes come and go, and Redis keeps no
history (no key outlives its job).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..snapshot import JobInfo, ProcessHold


@dataclass(frozen=True)
class View:
    """A parsed ``redis_lua.VIEW`` reply; times in seconds on the Redis clock."""

    now: float
    jobs: tuple[JobInfo, ...]
    owners: dict[str, str]  # job key -> owning process
    processes: tuple[ProcessHold, ...]


def parse_view(reply: Any, wall: float) -> View:
    """Read the VIEW script's reply; ``wall`` (this host's clock) dates the jobs,
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
        queued_at = int(fields.get("qt", 0)) / 1000
        started = int(fields["st"]) / 1000 if "st" in fields else None
        sharers = 0
        for name, value in fields.items():
            if name.startswith("w:"):
                sharers += int(value)
                waits[name[2:]] = waits.get(name[2:], 0) + int(value)
        state = "running" if fields.get("state") == "running" else "queued"
        jobs.append(
            JobInfo(
                key=key,
                caller=fields.get("caller", ""),
                state=state,
                sharers=sharers,
                queued_at=wall - (now - queued_at),
                started_at=None if started is None else wall - (now - started),
                queued_for=(started if started is not None else now) - queued_at,
                running_for=0.0 if started is None else now - started,
            )
        )
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
