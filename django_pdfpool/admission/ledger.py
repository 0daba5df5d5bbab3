"""What a pool counts and shows, the same for both pools: every ``Counter``, the books a
``Ledger`` keeps (counts, recent durations, ``retry_after`` estimates) and the snapshots."""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    PoolBusy,
    PoolClosed,
    PoolMisconfigured,
    Refused,
)

RECENT = 256  # how many recent durations the summaries and estimates cover
DEFAULT_RUN_TIME = 1.0  # seconds assumed for a job before any has finished
LIKELY = 0.9  # a Retry-After is when the place (or the caller) has freed, this often
ALIKE = 3  # recent runs of a size within 2x a job's that make its own estimate (else all runs)
AGAIN = 3  # a caller back as told and refused while nothing changed is told 2x as long, 3 times
REMEMBERED = 1024  # callers whose refusals are remembered (the oldest forgotten first)

# --- the counters (docs/metrics.md) -----------------------------------------------------


class CountedBy(Enum):
    """Who counts a counter in a Redis pool's cluster-wide books (each ``Ledger`` counts all)."""

    LUA = "lua"  # the script that decides the event tallies it by name: tally('joined', 1)
    PYTHON = "python"  # Python picks the name and hands it to a script (finish.lua's OUTCOME)
    PROCESS = "process"  # each process alone, never in Redis: no cluster-wide figure


class Counter(StrEnum):
    """One counter: its name, who counts it (a ``CountedBy`` value), its meaning, and for a
    refusal the ``Refused`` class it counts (once per caller; its ``code`` the metric's reason)."""

    counted_by: CountedBy
    meaning: str
    refusal: type[Refused] | None

    def __new__(
        cls, name: str, by: str, meaning: str, refusal: type[Refused] | None = None
    ) -> Counter:
        member = str.__new__(cls, name)
        member._value_, member.counted_by = name, CountedBy(by)
        member.meaning, member.refusal = meaning, refusal
        return member

    STARTED = "started", "lua", "jobs that took a slot"
    JOINED = "joined", "lua", "callers that shared a job in flight"
    COMPLETED = "completed", "python", "jobs that returned a result"
    FAILED = "failed", "python", "jobs that raised"
    CANCELLED = "cancelled", "python", "running jobs cancelled by stop()"
    ABANDONED = "abandoned", "lua", "queued jobs every waiter left"
    REFUSED_BUSY = "refused_busy", "lua", "queue full, or waited longer than wait (503)", PoolBusy
    REFUSED_CALLER = (
        "refused_caller", "lua", "caller already had a job in flight (429)", CallerBusy
    )  # fmt: skip
    REFUSED_CLOSED = (
        "refused_closed", "process", "the pool was draining or stopped (503)", PoolClosed
    )  # fmt: skip
    REFUSED_UNAVAILABLE = (
        "refused_unavailable", "process", "Redis could not coordinate the call (503)",
        CoordinatorUnavailable,
    )  # fmt: skip
    REFUSED_MISCONFIGURED = (
        "refused_misconfigured", "process", "Redis refused the settings of this process (503)",
        PoolMisconfigured,
    )  # fmt: skip

    @property
    def label(self) -> str:  # "Refused: busy" for refused_busy
        return self.value.capitalize().replace("_", ": ")

    @property
    def reason(self) -> str | None:  # a refusal's code (PoolBusy.code...); None for a job event
        return None if self.refusal is None else self.refusal.code

    @classmethod
    def refused(cls, refusal: PoolBusy | PoolClosed | CallerBusy) -> Counter:
        """The counter a refusal counts in: its own class's, else its nearest base's."""
        return next(c for kind in type(refusal).__mro__ for c in REFUSALS if c.refusal is kind)

    @classmethod
    def ended(cls, cancelled: bool, error: BaseException | None) -> Counter:
        """How a job that held a slot ended: cancelled, failed (raised) or completed."""
        return cls.CANCELLED if cancelled else cls.COMPLETED if error is None else cls.FAILED


REFUSALS = tuple(counter for counter in Counter if counter.reason is not None)  # enum's order

# --- the snapshot: plain, immutable, JSON-ready through ``as_dict`` ---------------------


@dataclass(frozen=True)
class Pressure:
    """What a door reads before a request's body: cheap, maybe stale (the pool decides)."""

    closed: bool  # the pool takes nothing new
    free: int  # slots and queue places not taken
    in_flight: bool  # a job for the key asked about is in flight (it can be joined)
    retry_after: float  # seconds until a place is likely free
    caller_busy: bool = False  # the caller holds another key's job, key's is not to join: 429
    caller_retry_after: float = 0.0  # the Retry-After that 429 would carry
    sizes: tuple[int, ...] | None = None  # of the jobs in flight, in bytes (None: not known)
    refusing: CoordinatorUnavailable | None = None  # every new call's answer (Redis failing)


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
        p95 = values[math.ceil(0.95 * len(values)) - 1]
        return cls(len(values), sum(values) / len(values), p95, values[-1])


class CountersBase:
    """``Counters`` besides its fields: read by ``Counter``, as a dict (in ``Counter`` order)."""

    def __getitem__(self, counter: Counter) -> int:
        return int(getattr(self, counter.value))

    def as_dict(self) -> dict[str, int]:
        return {c.value: self[c] for c in Counter}


if TYPE_CHECKING:

    class Counters(CountersBase):  # a frozen dataclass with one int field per Counter
        def __init__(self, **counts: int) -> None: ...
        def __getattr__(self, name: str) -> int: ...

else:
    Counters = dataclasses.make_dataclass(
        "Counters",
        [(counter.value, int, dataclasses.field(default=0)) for counter in Counter],
        bases=(CountersBase,),
        frozen=True,
        namespace={
            "__doc__": "Events since the pool was built, by Counter.",
            "__module__": __name__,
        },
    )


@dataclass(frozen=True)
class JobInfo:
    """One job in flight. Times are seconds; ``*_at`` are wall-clock epoch seconds."""

    key: str
    caller: str
    state: Literal["queued", "running"]
    sharers: int  # callers waiting for it, the starter included while it waits
    queued_at: float
    started_at: float | None
    queued_for: float  # time spent in the queue (so far, if still queued)
    running_for: float  # time since it took a slot (0 while queued)

    @classmethod
    def at(cls, key: str, caller: str, sharers: int, queued: float, started: float | None,
           now: float, wall: float) -> JobInfo:  # fmt: skip
        """From times on one clock (``started`` None while queued), read at ``now`` on that
        clock, which is wall-clock ``wall``: ages come from one clock, dates from the reader's."""
        return cls(
            key=key, caller=caller, state="queued" if started is None else "running",
            sharers=sharers, queued_at=wall - (now - queued),
            started_at=None if started is None else wall - (now - started),
            queued_for=(now if started is None else started) - queued,
            running_for=0.0 if started is None else now - started,
        )  # fmt: skip


@dataclass(frozen=True)
class PoolSnapshot:
    """Configuration, counts, jobs in flight and counters, read at one moment; ``scope``: whose
    counters and durations (this process's, or the cluster's), counted since ``counted_since``."""

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
    scope: Literal["process", "cluster"] = "process"
    counted_since: float | None = None  # wall clock; None while nothing was counted

    def as_dict(self) -> dict[str, Any]:  # ready for json.dumps
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
    """One reading of a Redis pool: ``cluster`` (the cluster's books while Redis answers),
    each process, and ``local`` (always this process's books)."""

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
    mismatch: str = ""  # why Redis refuses every job of this process: terms unlike the
    # live processes' (another deployment, other settings); "" while they are alike


# --- the books --------------------------------------------------------------------------


class Ledger:
    """One pool's books; thread-safe, its lock a leaf (a pool may call it under its own).
    ``ceiling``: the longest a job may run; no estimate of how long a running job runs on
    goes past it (docs/pool.md, Refusals)."""

    def __init__(
        self, slots: int, ceiling: float | None = None, queue: int = 0, wait: float | None = None
    ) -> None:
        self.slots, self.ceiling, self.queue, self.wait = slots, ceiling, queue, wait  # fixed
        self.born = time.time()  # the books count from here (wall clock)
        self._lock = threading.Lock()  # guards the fields below
        self._counts = dict.fromkeys(Counter, 0)
        self._queue_waits: deque[float] = deque(maxlen=RECENT)
        self._run_times: deque[float] = deque(maxlen=RECENT)
        self._run_sizes: deque[int | None] = deque(maxlen=RECENT)  # the input's, by _run_times
        self._elsewhere: Sequence[float] = ()  # run times seen elsewhere (``seed``)
        self._refused: dict[str, tuple[int, float]] = {}  # callers refused since the pool last
        # changed: the doublings they were told, and when (monotonic) they were told to come back
        self._state: Hashable = None  # the pool as last observed (a Redis pool's)

    def count(self, counter: Counter, n: int = 1) -> None:
        with self._lock:
            self._counts[counter] += n
            if counter is Counter.ABANDONED:
                self._refused.clear()  # a place freed

    def refused(self, counter: Counter, caller: str | None = None, told: float = 0.0) -> None:
        """Count a refusal; ``caller``, told to come back in ``told`` s, is told twice as long
        each time it comes back as told and is refused while nothing changed."""
        with self._lock:
            self._counts[counter] += 1
            if caller:  # moved to the end: the oldest refusal is forgotten first
                doublings = self._doublings(caller)
                self._refused.pop(caller, None)
                self._refused[caller] = (doublings, time.monotonic() + told)
                if len(self._refused) > REMEMBERED:
                    del self._refused[next(iter(self._refused))]

    def observe(self, state: Hashable) -> None:
        """The pool as read elsewhere (Redis): a new ``state`` is a change."""
        with self._lock:
            if state != self._state:
                self._state = state
                self._refused.clear()

    def started(self, queued_for: float) -> None:
        with self._lock:
            self._counts[Counter.STARTED] += 1
            self._queue_waits.append(queued_for)
            self._refused.clear()

    def ended(self, outcome: Counter, took: float, size: int | None = None) -> None:
        """A job that held a slot ended (``outcome``: ``Counter.ended``'s) after ``took`` s;
        ``size``: its input's bytes, if known."""
        with self._lock:
            self._counts[outcome] += 1
            self._run_times.append(took)
            self._run_sizes.append(size)
            self._refused.clear()

    def seed(self, took: Sequence[float]) -> None:
        """Run times of jobs run elsewhere (a cluster's): what books with no runs of their
        own estimate from (a process new to a cluster), never in their figures."""
        with self._lock:
            self._elsewhere = took

    def gave_up(self, waited: Sequence[float], callers: int) -> None:
        """Queued jobs were refused after waiting ``waited`` s each (``callers`` in all): their
        waits count in the queue-wait figures, as a started job's do."""
        with self._lock:
            self._counts[Counter.REFUSED_BUSY] += callers
            self._queue_waits.extend(waited)
            self._refused.clear()

    def expected_start(
        self, queued: int, running_for: Sequence[float] = (), head_waited: float | None = None,
        *, start: bool = False, caller: str | None = None, sizes: Sequence[int | None] = (),
    ) -> float:  # fmt: skip
        """The Retry-After until a newcomer is let in: a place frees (a running job ends, or
        the queue's head, queued ``head_waited`` s, is given up); ``start``: until it would
        take a slot. ``running_for``: how long each running job has run; ``sizes``: their
        inputs' bytes, if known."""
        with self._lock:
            behind = len(running_for) + queued + 1 - self.slots - (0 if start else self.queue)
            seconds = self._nth_free(running_for, behind, sizes)
            if head_waited is not None and self.wait is not None and not start:
                seconds = min(seconds, max(0.0, self.wait - head_waited))
            return self._told(seconds, caller)

    def expected_end(
        self, running_for: float | None, ahead: int, others: Sequence[float] = (),
        waited: float = 0.0, *, caller: str | None = None, size: int | None = None,
        sizes: Sequence[int | None] = (),
    ) -> float:  # fmt: skip
        """The Retry-After until a caller's job ends: one running for ``running_for`` s, or
        (None) one queued ``waited`` s behind ``ahead`` jobs while ``others`` run; ``size``
        and ``sizes``: the inputs' bytes of that job and of the others, if known."""
        with self._lock:
            if running_for is not None:
                return self._told(self._freed_by((running_for,), (size,)), caller)
            seconds = self._nth_free(others, ahead + 1, sizes)
            seconds += self._freed_by((0.0,), (size,))
            if self.wait is not None:  # given up once it has waited that long
                seconds = min(seconds, max(0.0, self.wait - waited))
            return self._told(seconds, caller)

    def _more(self, running_for: float, size: int | None) -> list[float]:  # under the lock
        """What the recent runs that took longer than ``running_for`` s took more, sorted (of
        a size within 2x of ``size`` when there are ``ALIKE`` such runs); none of them: as
        long again (never under ``DEFAULT_RUN_TIME`` in all); never past the ceiling."""
        runs: Sequence[float] = self._run_times or self._elsewhere
        if size is not None and self._run_times:
            sized = zip(runs, self._run_sizes, strict=True)
            alike = [t for t, s in sized if s and size <= 2 * s <= 4 * size]
            runs = alike if len(alike) >= ALIKE else runs
        more = sorted(took - running_for for took in runs if took > running_for)
        if not more:
            more = [max(running_for, DEFAULT_RUN_TIME - running_for)]
        if self.ceiling is not None:
            most = max(0.0, self.ceiling - running_for)
            more = [min(seconds, most) for seconds in more]
        return more

    def _freed_by(self, running_for: Sequence[float], sizes: Sequence[int | None] = ()) -> float:
        """The first time by which one of the jobs that have run ``running_for`` s each (their
        inputs ``sizes`` bytes, if known) has ended in ``LIKELY`` of the cases the recent runs
        that took longer make."""
        known = sizes or (None,) * len(running_for)
        mores = [self._more(t, size) for t, size in zip(running_for, known, strict=True)]

        def ended(by: float) -> bool:  # all still running at ``by``: unlikely enough
            running = [1 - bisect.bisect_right(more, by) / len(more) for more in mores]
            return math.prod(running) <= 1 - LIKELY

        times = sorted(set().union(*mores))  # when some job may end
        return times[bisect.bisect_left(times, True, key=ended)]

    def _nth_free(self, running_for: Sequence[float], n: int, sizes: Sequence[int | None]) -> float:
        """Seconds until the ``n``-th slot frees (a free slot is free now): the first once a
        running job has likely ended, each later one a typical run (the recent mean, else the
        longest run so far, at least ``DEFAULT_RUN_TIME``) over the slots after."""
        free = self.slots - len(running_for)
        if n <= free:
            return 0.0
        runs = self._run_times or self._elsewhere
        typical = sum(runs) / len(runs) if runs else max((DEFAULT_RUN_TIME, *running_for))
        first = self._freed_by(running_for, sizes) if running_for else typical
        return first + typical * (n - max(free, 0) - 1) / self.slots

    def _told(self, seconds: float, caller: str | None) -> float:  # under the lock
        """``seconds``, at least 1, doubled as ``_doublings`` says."""
        return max(1.0, seconds) * float(2 ** self._doublings(caller))

    def _doublings(self, caller: str | None) -> int:  # under the lock
        """How often ``caller``'s Retry-After doubles now: once more than it was last told if
        it came back as told (none the first time), as last told if it came back sooner."""
        if not caller or caller not in self._refused:
            return 0
        told, back = self._refused[caller]
        return min(told + 1, AGAIN) if time.monotonic() >= back else told

    def snapshot(
        self, queue: int, wait: float | None, closed: bool, jobs: Iterable[JobInfo]
    ) -> PoolSnapshot:
        """These books with ``jobs``."""
        jobs = tuple(jobs)
        running = sum(job.state == "running" for job in jobs)
        with self._lock:
            counters = Counters(**{c.value: n for c, n in self._counts.items()})
            waits, runs = DurationSummary.of(self._queue_waits), DurationSummary.of(self._run_times)
        return PoolSnapshot(
            slots=self.slots, queue=queue, wait=wait, closed=closed, running=running,
            queued=len(jobs) - running, jobs=jobs, queue_wait=waits, run_time=runs,
            counters=counters,
            taken_at=time.time(), counted_since=self.born,
        )  # fmt: skip
