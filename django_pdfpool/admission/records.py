"""The records both pools keep of a call and of a job in flight, and how a job is run.

A ``Waiter`` is one awaiting call: a future on the caller's own event loop, never on the
job loop's. A ``JobRecord`` is one job; each pool says which lock or loop guards it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..bounds import QUEUE, SLOTS, WAIT
from ..exceptions import JobFault
from .protocol import DropFn, JobFn
from .snapshot import JobInfo


class Waiter:
    """One awaiting call: a future on the caller's own event loop."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


class JobRecord:
    """A job in flight: who shares it, what it owns, where it stands."""

    __slots__ = (
        "caller",
        "fn",
        "key",
        "on_drop",
        "queued_mono",
        "ran",
        "started_mono",
        "starter",
        "state",
        "task",
        "waiters",
    )

    def __init__(
        self,
        key: str,
        caller: str = "",
        fn: JobFn | None = None,
        on_drop: DropFn | None = None,
        starter: Waiter | None = None,
    ) -> None:
        self.key = key
        self.caller = caller
        self.fn = fn
        self.on_drop = on_drop
        self.ran = False  # fn was called (a task cancelled before its first step never calls it)
        self.starter = starter
        self.waiters: set[Any] = set() if starter is None else {starter}
        self.state = "queued"  # then "running"; a local job ends "done"
        self.queued_mono = time.monotonic()
        self.started_mono: float | None = None
        self.task: asyncio.Task[Any] | None = None

    def sharers(self) -> int:
        """Waiters besides the starter."""
        return len(self.waiters) - (self.starter in self.waiters)

    def running_for(self, now: float) -> float | None:
        """Seconds since it took a slot; None while queued."""
        if self.state == "running" and self.started_mono is not None:
            return now - self.started_mono
        return None

    def release(self) -> DropFn | None:
        """Let go of what the job owned; return its ``on_drop`` if ``fn`` was never
        called (the caller calls it, outside any lock), so that exactly one of the two is."""
        dropped = None if self.ran else self.on_drop
        self.fn = self.on_drop = None
        return dropped

    def info(self, now: float, wall: float) -> JobInfo:
        """This job for a snapshot, read at monotonic ``now`` (wall clock ``wall``)."""
        started = self.started_mono if self.state == "running" else None
        return JobInfo.at(
            self.key, self.caller, len(self.waiters), self.queued_mono, started, now, wall
        )


async def run_fn(job: JobRecord) -> Any:
    """A job's task: note that ``fn`` was called (see ``release``), then call it.
    An error, even in calling ``fn``, stays inside the task as the job's failure; only a
    cancellation of the job itself (``stop()``) ends it as cancelled."""
    fn, job.ran = job.fn, True
    assert fn is not None  # a job's fn is let go only once it has ended
    try:
        return await fn()
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the job itself was cancelled
        raise JobFault("the job raised CancelledError, but nothing cancelled the job") from exc
    except (KeyboardInterrupt, SystemExit) as exc:
        raise JobFault(f"the job raised {type(exc).__name__}") from exc


def check_terms(slots: int, queue: int, wait: float | None) -> None:
    """ValueError unless ``slots``, ``queue`` and ``wait`` make a pool: both pools' check."""
    SLOTS.require("slots", slots)
    QUEUE.require("queue", queue)
    WAIT.require("wait", wait)  # also refuses NaN
