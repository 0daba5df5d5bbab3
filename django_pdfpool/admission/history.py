"""The pool's last few minutes, for the status page's chart: a ``Recorder`` samples a pool
on the job loop into a bounded ring (no thread of its own, no Django). Each process has
its own (``configured.recorder``); a forked child starts with an empty, stopped one."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .jobs import call_in_job_loop, forgotten_in_child
from .ledger import REFUSALS
from .protocol import AdmissionPool

logger = logging.getLogger("django_pdfpool.history")


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One point of the chart: the pool at one moment (``t``, wall clock), and the callers
    refused (every ``Counter`` with a ``reason``) since the point before."""

    t: float
    running: int
    queued: int
    refused: int


Books = tuple[str, float | None]  # whose counters a snapshot gives, and since when
SAME_START = 1.0  # seconds: the cluster's start, read on Redis's clock, moves by a few ms


def _same_books(a: Books, b: Books) -> bool:
    """Counters that go on from one reading to the next (a start not known yet, None, is no
    change: the cluster's books begin at their first event)."""
    return a[0] == b[0] and (a[1] is None or b[1] is None or abs(a[1] - b[1]) < SAME_START)


class Recorder:
    """Sample ``read()`` (a pool, or None while there is none) every ``interval`` seconds,
    keeping the last ``size`` samples."""

    def __init__(
        self, read: Callable[[], AdmissionPool | None], *, interval: float = 1.0, size: int = 300
    ) -> None:
        if not interval > 0 or size < 2:
            raise ValueError("interval must be > 0 and size >= 2")
        self.read, self.interval, self.size = read, interval, size
        self._lock = threading.Lock()
        self._samples: deque[HistoryPoint] = deque(maxlen=size)
        self._last: tuple[AdmissionPool, Books, int] | None = None  # pool, books, refusals
        self._generation = 0  # bumped by start() and stop(): older tick chains end
        self._ticking = False
        forgotten_in_child.add(self)

    def start(self) -> None:
        """Start sampling, if not already; cheap to call on every request."""
        with self._lock:
            if self._ticking:
                return
            self._ticking = True
            self._generation += 1
            call_in_job_loop(self._tick, self._generation)

    def stop(self) -> None:
        """Stop sampling; the samples taken so far stay."""
        with self._lock:
            self._ticking = False
            self._generation += 1

    def sample(self) -> HistoryPoint | None:
        """Take one sample now (from any thread); None when there is no pool yet."""
        if (source := self.read()) is None:
            return None
        snapshot = source.snapshot()
        total = sum(snapshot.counters[counter] for counter in REFUSALS)
        books = (snapshot.scope, snapshot.counted_since)
        with self._lock:
            pool, was, before = self._last or (source, books, total)  # the first: a baseline
            if pool is source and _same_books(was, books):
                refused = max(0, total - before)
            elif pool is not source and books[0] == "process":
                refused = total  # a rebuilt pool counts from zero
            else:  # other books (Redis failing or back, the cluster's restarted): a baseline
                refused = 0
            self._last = (source, books, total)
            sample = HistoryPoint(snapshot.taken_at, snapshot.running, snapshot.queued, refused)
            self._samples.append(sample)
        return sample

    def samples(self) -> list[HistoryPoint]:  # oldest first
        with self._lock:
            return list(self._samples)

    def as_dict(self) -> dict[str, Any]:  # JSON-ready, one list per field: compact for polling
        samples = self.samples()
        return {
            "interval": self.interval,
            "window": self.interval * self.size,  # seconds the ring holds when full
            "t": [round(s.t, 2) for s in samples],
            "running": [s.running for s in samples],
            "queued": [s.queued for s in samples],
            "refused": [s.refused for s in samples],
        }

    def _tick(self, generation: int) -> None:
        """On the job loop: sample in a worker thread (a Redis pool's snapshot blocks on
        Redis, and nothing may block the job loop), then schedule the next tick."""
        if generation != self._generation:
            return
        loop, started = asyncio.get_running_loop(), time.monotonic()
        try:
            sampling = loop.run_in_executor(None, self._sample_logged)
        except RuntimeError:  # the executors shut down: the process is ending
            self.stop()
            return
        sampling.add_done_callback(lambda _: self._after(loop, generation, started))

    def _sample_logged(self) -> None:
        try:
            self.sample()
        except Exception:
            logger.exception("the PDF pool history recorder failed to sample")

    def _after(self, loop: asyncio.AbstractEventLoop, generation: int, started: float) -> None:
        delay = max(0.0, self.interval - (time.monotonic() - started))
        loop.call_later(delay, self._tick, generation)

    def _forget(self) -> None:
        """In a forked child: another process, another pool; start empty and stopped."""
        self._lock = threading.Lock()
        self._samples.clear()
        self._last = None
        self.stop()
