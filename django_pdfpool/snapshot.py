"""What a status page reads from a pool: one consistent, immutable snapshot.

Plain dataclasses with no behaviour beyond summarising; ``as_dict`` gives the
JSON-ready form a status endpoint serves.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

JobState = Literal["queued", "running"]


@dataclass(frozen=True)
class Figures:
    """Summary of recent durations in seconds (zeros when there are none yet)."""

    count: int = 0
    mean: float = 0.0
    p95: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, samples: Iterable[float]) -> Figures:
        values = sorted(samples)
        if not values:
            return cls()
        p95 = values[max(0, math.ceil(0.95 * len(values)) - 1)]
        return cls(len(values), sum(values) / len(values), p95, values[-1])


@dataclass(frozen=True)
class Counters:
    """Events since the pool was built. A refusal counts once per refused caller."""

    started: int = 0  # jobs that took a slot
    joined: int = 0  # callers that shared a job instead of starting one
    completed: int = 0  # jobs that returned a result
    failed: int = 0  # jobs that raised
    cancelled: int = 0  # running jobs cancelled by stop()
    abandoned: int = 0  # queued jobs whose every waiter left
    refused_busy: int = 0  # queue full, or waited longer than `wait`
    refused_caller: int = 0  # caller already had a job in flight
    refused_closed: int = 0  # drain() or stop() had begun


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
        queued_mono: float,
        started_mono: float | None,
        now: float,
        wall: float,
    ) -> JobInfo:
        """From monotonic times (``started_mono`` None while queued), read at monotonic
        ``now``, which is wall-clock ``wall``."""
        return cls(
            key=key,
            caller=caller,
            state="queued" if started_mono is None else "running",
            sharers=sharers,
            queued_at=wall - (now - queued_mono),
            started_at=None if started_mono is None else wall - (now - started_mono),
            queued_for=(now if started_mono is None else started_mono) - queued_mono,
            running_for=0.0 if started_mono is None else now - started_mono,
        )


@dataclass(frozen=True)
class PoolSnapshot:
    """Configuration, counts, jobs in flight and counters, read under one lock."""

    slots: int
    queue: int
    wait: float | None
    closed: bool
    running: int
    queued: int
    jobs: tuple[JobInfo, ...]
    counters: Counters
    queue_wait: Figures  # over recently started jobs
    run_time: Figures  # over recently finished jobs
    taken_at: float  # wall clock

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts, lists and numbers, ready for ``json.dumps``."""
        return dataclasses.asdict(self)
