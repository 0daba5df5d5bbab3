"""A pool's books, kept the same way by both pools: counters, recent durations, the
``retry_after`` estimates made from them, and the snapshot they go into.

A ``Ledger`` is thread-safe: its own lock is a leaf (taken last, held for a few updates),
so a pool may call it under its own lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence

from .counters import Counter
from .snapshot import Counters, DurationSummary, JobInfo, PoolSnapshot

RECENT = 256  # how many recent durations the summaries and estimates cover
DEFAULT_RUN_TIME = 1.0  # seconds assumed for a job before any has finished


class RecentDurations:
    """The last few durations, with their running sum for a cheap mean."""

    __slots__ = ("samples", "total")

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=RECENT)
        self.total = 0.0

    def add(self, value: float) -> None:
        if len(self.samples) == self.samples.maxlen:
            self.total -= self.samples[0]
        self.samples.append(value)
        self.total += value

    def mean(self, default: float) -> float:
        return self.total / len(self.samples) if self.samples else default


class Ledger:
    """Counters and durations of one pool. ``ceiling``: the longest a job may run (the
    extraction timeout), which no estimate of a running job's end goes past."""

    __slots__ = ("_counts", "_lock", "_queue_waits", "_run_times", "born", "ceiling", "slots")

    def __init__(self, slots: int, ceiling: float | None = None) -> None:
        self.slots, self.ceiling = slots, ceiling
        self.born = time.time()  # the books count from here (wall clock)
        self._lock = threading.Lock()  # guards the three fields below
        self._counts = dict.fromkeys(Counter, 0)
        self._queue_waits = RecentDurations()
        self._run_times = RecentDurations()

    def count(self, counter: Counter, n: int = 1) -> None:
        with self._lock:
            self._counts[counter] += n

    def started(self, queued_for: float) -> None:
        """A job took a slot after ``queued_for`` seconds in the queue."""
        with self._lock:
            self._counts[Counter.STARTED] += 1
            self._queue_waits.add(queued_for)

    def ended(self, outcome: Counter, took: float) -> None:
        """A job that held a slot ended: ``Counter.ended``'s outcome, after ``took`` s."""
        with self._lock:
            self._counts[outcome] += 1
            self._run_times.add(took)

    def gave_up(self, waited: Sequence[float], callers: int) -> None:
        """Queued jobs that waited ``waited`` seconds each were refused (``callers`` in
        all): their waits count in the queue-wait figures, as a started job's do."""
        with self._lock:
            self._counts[Counter.REFUSED_BUSY] += callers
            for seconds in waited:
                self._queue_waits.add(seconds)

    def _typical(self, running_for: Iterable[float]) -> float:
        """A job's likely run time: the recent mean, or before any job has finished, the
        longest a job has run so far (at least ``DEFAULT_RUN_TIME``). Under the lock."""
        if self._run_times.samples:
            return self._run_times.mean(DEFAULT_RUN_TIME)
        return max((DEFAULT_RUN_TIME, *running_for))

    def _left(self, running_for: float, typical: float) -> float:
        """Seconds a job running for ``running_for`` likely has left: what the typical
        run still leaves, else (overdue) as long again as it has run, never past the
        ceiling."""
        left = typical - running_for
        if left <= 0:
            left = running_for
        if self.ceiling is not None:
            left = min(left, max(0.0, self.ceiling - running_for))
        return left

    def expected_start(self, queued: int, running_for: Sequence[float] = ()) -> float:
        """Seconds until a new job could likely take a slot, with ``queued`` jobs ahead;
        ``running_for``: how long each running job has run, when the pool knows."""
        with self._lock:
            typical = self._typical(running_for)
            if len(running_for) < self.slots:  # unknown: a typical run frees the first slot
                return typical * (queued + 1) / self.slots
            first_free = min(self._left(seconds, typical) for seconds in running_for)
        return first_free + typical * queued / self.slots

    def expected_end(self, running_for: float | None, ahead: int) -> float:
        """Seconds until a job likely ends: one running for ``running_for`` s, or (None)
        one queued behind ``ahead`` jobs."""
        with self._lock:
            if running_for is not None:
                return self._left(running_for, self._typical((running_for,)))
            typical = self._typical(())
        return typical * (ahead + 1) / self.slots + typical

    def snapshot(
        self,
        *,
        queue: int,
        wait: float | None,
        closed: bool,
        jobs: Iterable[JobInfo],
        running: int | None = None,
        queued: int | None = None,
        extra: Counters | None = None,
    ) -> PoolSnapshot:
        """A snapshot of these books with ``jobs``; ``running``/``queued`` default to
        counting the jobs' states, ``extra`` counters are added to this ledger's."""
        jobs = tuple(jobs)
        if running is None:
            running = sum(job.state == "running" for job in jobs)
        if queued is None:
            queued = len(jobs) - running
        with self._lock:
            counters = Counters(**{c.value: n for c, n in self._counts.items()})
            queue_wait = DurationSummary.of(self._queue_waits.samples)
            run_time = DurationSummary.of(self._run_times.samples)
        return PoolSnapshot(
            slots=self.slots,
            queue=queue,
            wait=wait,
            closed=closed,
            running=running,
            queued=queued,
            jobs=jobs,
            counters=counters if extra is None else counters.plus(extra),
            queue_wait=queue_wait,
            run_time=run_time,
            taken_at=time.time(),
            scope="process",
            counted_since=self.born,
        )
