"""What a status page reads from a pool: one consistent, immutable snapshot.

Plain dataclasses, the same for both pools; ``PoolSnapshot.as_dict`` gives the JSON-ready
form a status endpoint serves. A Redis-coordinated pool adds a ``ClusterSnapshot``: the
whole cluster, each process, and this one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .counters import Counter

JobState = Literal["queued", "running"]
BooksScope = Literal["process", "cluster"]  # whose counters: a process's or the cluster's


@dataclass(frozen=True)
class Pressure:
    """What a door needs before reading a request's body: a cheap, possibly stale
    reading (the pool stays the authority when the call comes)."""

    closed: bool  # the pool takes nothing new
    free: int  # slots and queue places not taken
    in_flight: bool  # a job for the key asked about is in flight (it can be joined)
    retry_after: float  # seconds until a place is likely free
    # ``caller`` (when asked about) has a job in flight for a key other than ``key``, and
    # ``key``'s job is not in flight to join: the pool would answer 429 caller_busy (rule 2)
    caller_busy: bool = False
    caller_retry_after: float = 0.0  # the Retry-After that 429 would carry


@dataclass(frozen=True)
class DurationSummary:
    """Summary of recent durations in seconds (zeros when there are none yet)."""

    count: int = 0
    mean: float = 0.0
    p95: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, samples: Iterable[float]) -> DurationSummary:
        values = sorted(samples)
        if not values:
            return cls()
        p95 = values[max(0, math.ceil(0.95 * len(values)) - 1)]
        return cls(len(values), sum(values) / len(values), p95, values[-1])


class CountersBase:
    """What every ``Counters`` has besides its fields: reading by ``Counter`` and sums."""

    __slots__ = ()

    def __getitem__(self, counter: Counter) -> int:
        return int(getattr(self, counter.value))

    def as_dict(self) -> dict[str, int]:
        """Name -> count, in ``Counter`` order (JSON-ready)."""
        return {c.value: self[c] for c in Counter}

    def plus(self, other: CountersBase) -> Counters:
        """Both counts added, counter by counter."""
        return Counters(**{c.value: self[c] + other[c] for c in Counter})


if TYPE_CHECKING:

    class Counters(CountersBase):
        """For type checkers: a frozen dataclass with one ``int`` field per ``Counter``."""

        def __init__(self, **counts: int) -> None: ...
        def __getattr__(self, name: str) -> int: ...

else:
    Counters = dataclasses.make_dataclass(
        "Counters",
        [(counter.value, int, dataclasses.field(default=0)) for counter in Counter],
        bases=(CountersBase,),
        frozen=True,
        namespace={
            "__doc__": "Events since the pool was built, one field per ``Counter`` (its "
            "name): ``counters.joined`` or ``counters[Counter.JOINED]``. A refusal counts "
            "once per refused caller.",
            "__module__": __name__,
        },
    )


@dataclass(frozen=True)
class JobInfo:
    """One job in flight. Times are seconds; ``*_at`` are wall-clock epoch seconds."""

    key: str
    caller: str
    state: JobState
    sharers: int  # callers waiting for it, the starter included while it waits
    queued_at: float
    started_at: float | None
    queued_for: float  # time spent in the queue (so far, if still queued)
    running_for: float  # time since it took a slot (0 while queued)

    @classmethod
    def at(
        cls,
        key: str,
        caller: str,
        sharers: int,
        queued: float,
        started: float | None,
        now: float,
        wall: float,
    ) -> JobInfo:
        """From times on one clock (``started`` None while queued), read at ``now`` on that
        clock, which is wall-clock ``wall``: ages come from one clock, dates from the reader's."""
        return cls(
            key=key,
            caller=caller,
            state="queued" if started is None else "running",
            sharers=sharers,
            queued_at=wall - (now - queued),
            started_at=None if started is None else wall - (now - started),
            queued_for=(now if started is None else started) - queued,
            running_for=0.0 if started is None else now - started,
        )


@dataclass(frozen=True)
class PoolSnapshot:
    """Configuration, counts, jobs in flight and counters, read at one moment. ``scope``
    says whose counters and duration figures these are: one process's pool, counted since
    it was built, or (a Redis pool) every process's, counted in Redis; ``counted_since``
    (wall clock) is when they began, None while nothing was counted."""

    slots: int
    queue: int
    wait: float | None
    closed: bool
    running: int
    queued: int
    jobs: tuple[JobInfo, ...]
    counters: Counters
    queue_wait: DurationSummary  # over recently started jobs
    run_time: DurationSummary  # over recently finished jobs
    taken_at: float  # wall clock
    scope: BooksScope = "process"
    counted_since: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts, lists and numbers, ready for ``json.dumps``."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProcessHold:
    """One process sharing a Redis namespace, as Redis sees it."""

    process: str  # "host:pid:tag"
    host: str
    pid: int
    lease_left: float  # seconds until its lease ends; negative: ended, not yet reaped
    running: tuple[str, ...]  # keys of the jobs it runs
    queued: tuple[str, ...]  # keys of its jobs waiting for a slot
    waiting: int  # its callers waiting on jobs in flight (starters included)


@dataclass(frozen=True)
class ClusterSnapshot:
    """One reading of a Redis-coordinated pool: cluster-wide, per process, and this process.
    While Redis answers, ``cluster``'s counters and duration summaries are the cluster's
    (kept in Redis, ``scope`` "cluster"); ``local``'s are always this process's."""

    mode: str  # "redis", "local-fallback" or "refusing"
    url: str  # without its password
    namespace: str
    process: str  # this process's id
    lease: float
    cluster: PoolSnapshot
    local: PoolSnapshot
    processes: tuple[ProcessHold, ...]
    trouble: str | None = None  # while not "redis": "unreachable", or "refused" (writes)
    redis_error: str = ""  # the last Redis failure, as the log said it
    unreachable: int = 0  # times this process fell back because Redis did not answer
    refused_writes: int = 0  # ... because Redis refused a write (OOM, READONLY, NOPERM)
