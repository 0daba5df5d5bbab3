"""The admission pool: a few slots, a short queue, single-flight, one job per caller.

Generic: it knows nothing of Django or PDFs. A job is ``fn()``, an awaitable run
on the process's background job loop (see ``jobloop``), never on a caller's loop,
so a job outlives the request (and the event loop) that started it. Callers may
await ``run`` from any event loop in any thread; each is woken on its own loop.

``run(key, caller, fn)`` applies these rules, in this order:

1. Join: a job for ``key`` is in flight (running or queued): share its outcome.
2. Caller: ``caller`` already holds a job in flight for another key: CallerBusy.
3. Slot: start while a slot is free; else queue (PoolBusy if the queue is full),
   first come first served, until a slot frees or ``wait`` passes (PoolBusy).
4. A caller that leaves does not stop the job; a queued job that every waiter
   has left gives up its place.
5. No cache: when a job ends its key is forgotten; its result or exception
   reaches every sharer, each with an exception object of its own.
6. One ``threading.Lock`` guards all state; nothing is left behind by leavers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .jobloop import call_in_job_loop
from .snapshot import Counters, Figures, JobInfo, PoolSnapshot

__all__ = [
    "CallerBusy",
    "Pool",
    "PoolBusy",
    "PoolClosed",
    "Refused",
]

T = TypeVar("T")
JobFn = Callable[[], Awaitable[Any]]
DropFn = Callable[[], None]
ErrorObserver = Callable[[str, BaseException], None]

logger = logging.getLogger("django_pdfpool.pool")

_RECENT = 256  # how many recent durations the figures summarise


class Refused(Exception):
    """Base of every refusal. ``code`` is short and machine-readable;
    ``retry_after`` is the pool's estimate, in seconds, of when trying again may work."""

    code = "refused"

    def __init__(self, message: str = "", retry_after: float = 0.0) -> None:
        super().__init__(message or self.__doc__)
        self.retry_after = retry_after


class PoolBusy(Refused):
    """Every slot is taken and the queue is full, or the job waited longer than `wait`."""

    code = "busy"


class CallerBusy(Refused):
    """This caller already has a job in flight."""

    code = "caller_busy"


class PoolClosed(Refused):
    """The pool is draining or stopped and accepts no new work."""

    code = "closed"


class _Waiter:
    """One awaiting caller: a future on the caller's own event loop."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


class _Job:
    """A job in flight; mutated only under the pool's lock (``task`` on the job loop)."""

    __slots__ = (
        "caller",
        "deadline",
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
        self, key: str, caller: str, fn: JobFn, on_drop: DropFn | None, starter: _Waiter
    ) -> None:
        self.key = key
        self.caller = caller
        self.fn: JobFn | None = fn
        self.on_drop = on_drop
        self.ran = False  # fn was called (a task cancelled before its first step never calls it)
        self.starter = starter
        self.waiters: set[_Waiter] = {starter}
        self.state = "queued"  # then "running", then "done"
        self.queued_mono = time.monotonic()
        self.started_mono: float | None = None
        self.deadline: float | None = None
        self.task: asyncio.Task[Any] | None = None


class _Recent:
    """The last few durations, with their running sum for a cheap mean."""

    __slots__ = ("samples", "total")

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=_RECENT)
        self.total = 0.0

    def add(self, value: float) -> None:
        if len(self.samples) == self.samples.maxlen:
            self.total -= self.samples[0]
        self.samples.append(value)
        self.total += value

    def mean(self, default: float) -> float:
        return self.total / len(self.samples) if self.samples else default


class Pool:
    """Admit jobs through ``slots`` running at once and a ``queue`` of waiting jobs;
    a queued job waits at most ``wait`` seconds (None: no limit)."""

    def __init__(
        self,
        slots: int = 2,
        queue: int = 4,
        wait: float | None = 10.0,
        *,
        on_error: ErrorObserver | None = None,
    ) -> None:
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an integer >= 1, not {slots!r}")
        if not isinstance(queue, int) or queue < 0:
            raise ValueError(f"queue must be an integer >= 0, not {queue!r}")
        if wait is not None and not (wait >= 0):  # also refuses NaN
            raise ValueError(f"wait must be a number of seconds >= 0 or None, not {wait!r}")
        self.slots, self.queue_size, self.wait = slots, queue, wait
        self._on_error = on_error or _log_error
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}  # in flight, by key
        self._callers: dict[str, _Job] = {}  # in flight, by the caller that started it
        self._queue: deque[_Job] = deque()
        self._running = 0
        self._closed = False
        self._stopping = False
        self._idle_waiters: list[_Waiter] = []
        # One wait timer, for the head of the queue: every job waits the same `wait`
        # and the queue is FIFO, so deadlines grow along it. `_timer` lives on the job
        # loop; `_timer_wanted` (under the lock) says whether it should be armed.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_wanted = False
        self._counts = dict.fromkeys(Counters.__dataclass_fields__, 0)
        self._queue_waits = _Recent()
        self._run_times = _Recent()

    # --- reading ------------------------------------------------------------

    def running(self) -> int:
        """Jobs holding a slot."""
        return self._running

    def queued(self) -> int:
        """Jobs waiting for a slot."""
        return len(self._queue)

    def waiting(self, key: str) -> int:
        """Callers sharing ``key``'s job, not counting the one that started it."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                return 0
            return len(job.waiters) - (job.starter in job.waiters)

    def snapshot(self) -> PoolSnapshot:
        """One consistent read of configuration, counts, jobs in flight and counters."""
        with self._lock:
            now, wall = time.monotonic(), time.time()
            jobs = tuple(_job_info(job, now, wall) for job in self._jobs.values())
            counters = Counters(**self._counts)
            waits = list(self._queue_waits.samples)
            runs = list(self._run_times.samples)
            running, queued, closed = self._running, len(self._queue), self._closed
        return PoolSnapshot(
            slots=self.slots,
            queue=self.queue_size,
            wait=self.wait,
            closed=closed,
            running=running,
            queued=queued,
            jobs=jobs,
            counters=counters,
            queue_wait=Figures.of(waits),
            run_time=Figures.of(runs),
            taken_at=wall,
        )

    # --- running ------------------------------------------------------------

    async def run(
        self, key: str, caller: str, fn: JobFn | None, *, on_drop: DropFn | None = None
    ) -> Any:
        """Run ``fn`` as the job for ``key`` on behalf of ``caller``, or share the
        job already in flight for ``key``; return its result or raise its error.

        Exactly one of ``fn()`` and ``on_drop()`` is eventually called, so what the
        job owns can always be let go: ``on_drop`` runs (on some thread) when ``fn``
        never will: the call joined or was refused, or its queued job was dropped.
        """
        waiter = _Waiter(asyncio.get_running_loop())
        try:
            with self._lock:
                job = self._admit(key, caller, fn, on_drop, waiter)
                adopted = job.starter is waiter  # this call made the job
        except BaseException:
            _call_dropped([on_drop])
            raise
        if not adopted:
            _call_dropped([on_drop])  # joined: this call's fn is not needed
        try:
            return await waiter.future
        except BaseException:
            # Rule 4: leaving (cancelled, timed out) never stops the job for others.
            self._leave(job, waiter)
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.exception()  # answered as we left: mark it retrieved
            raise

    def _admit(
        self,
        key: str,
        caller: str,
        fn: JobFn | None,
        on_drop: DropFn | None,
        waiter: _Waiter,
    ) -> _Job:
        """Apply the rules to a new call; return the job it now waits for. Under the lock."""
        if self._closed:
            self._counts["refused_closed"] += 1
            raise PoolClosed("the pool is closing and accepts no new work")
        job = self._jobs.get(key)
        if job is not None:  # Rule 1: join; no slot, no queue place, any caller.
            job.waiters.add(waiter)
            self._counts["joined"] += 1
            return job
        if fn is None:
            raise ValueError(f"nothing to join for key {key!r}, and no fn to start a job")
        held = self._callers.get(caller)
        if held is not None:  # Rule 2: one job per caller, even if its starter left.
            self._counts["refused_caller"] += 1
            raise CallerBusy("this caller already has a job in flight", self._expected_end(held))
        if self._running >= self.slots and len(self._queue) >= self.queue_size:
            self._counts["refused_busy"] += 1  # Rule 3: a full queue refuses at once.
            raise PoolBusy("every slot is taken and the queue is full", self._expected_start())
        job = _Job(key, caller, fn, on_drop, waiter)
        self._jobs[key] = job
        self._callers[caller] = job
        if self._running < self.slots:
            self._start(job)
        else:
            self._queue.append(job)
            if self.wait is not None:
                job.deadline = job.queued_mono + self.wait
                if not self._timer_wanted:
                    self._timer_wanted = True
                    call_in_job_loop(self._arm_timer)
        return job

    def _start(self, job: _Job, *, on_job_loop: bool = False) -> None:
        """Give ``job`` a slot and run it on the job loop. Under the lock."""
        job.state = "running"
        job.started_mono = time.monotonic()
        self._running += 1
        self._counts["started"] += 1
        self._queue_waits.add(job.started_mono - job.queued_mono)
        if on_job_loop:
            self._spawn(job)
        else:
            call_in_job_loop(self._spawn, job)

    def _spawn(self, job: _Job) -> None:
        """On the job loop: run the job as a task; its ending is handled in ``_finish``."""
        assert job.fn is not None  # a job is only spawned once, before it ends
        job.task = asyncio.get_running_loop().create_task(_run_job(job))
        job.task.add_done_callback(lambda task: self._finish(job, task))

    def _finish(self, job: _Job, task: asyncio.Task[Any]) -> None:
        """On the job loop: free the slot and the caller, forget the key (rule 5),
        start what the queue holds, and hand the outcome to every sharer."""
        result, error = _outcome(task, self._stopping)
        with self._lock:
            dropped = [None if job.ran else job.on_drop]  # stopped before fn was called
            job.state, job.fn, job.on_drop = "done", None, None  # let go of what it owned
            del self._jobs[job.key]
            del self._callers[job.caller]
            self._running -= 1
            self._run_times.add(time.monotonic() - (job.started_mono or job.queued_mono))
            if task.cancelled():
                self._counts["cancelled"] += 1
            else:
                self._counts["failed" if error is not None else "completed"] += 1
            waiters, job.waiters = job.waiters, set()
            while self._queue and self._running < self.slots:
                self._start(self._dequeue(self._queue[0]), on_job_loop=True)
            idle = self._take_idle_waiters()
        _call_dropped(dropped)
        _deliver(waiters, result, error)
        _deliver(idle, None, None)
        if error is not None and not task.cancelled():
            try:
                self._on_error(job.key, error)
            except Exception:
                logger.exception("the pool's on_error observer failed")

    def _dequeue(self, job: _Job) -> _Job:
        """Take ``job`` out of the queue; an empty queue needs no timer. Under the lock."""
        self._queue.remove(job)
        if not self._queue and self._timer_wanted:
            self._timer_wanted = False
            call_in_job_loop(self._cancel_timer)
        return job

    def _arm_timer(self) -> None:
        """On the job loop: (re)arm the timer for the queue's head, if it is wanted."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            if self._timer_wanted and self._queue:
                delay = max(0.0, (self._queue[0].deadline or 0.0) - time.monotonic())
                self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _cancel_timer(self) -> None:
        """On the job loop: the queue emptied; drop the timer unless it is wanted again."""
        with self._lock:
            wanted = self._timer_wanted
        if not wanted and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        """On the job loop: rule 3, ``wait`` passed for the queue's head (and any
        job behind it due as well); PoolBusy to every sharer of each."""
        self._timer = None
        refused: list[set[_Waiter]] = []
        dropped: list[DropFn | None] = []
        with self._lock:
            now = time.monotonic()
            while self._queue and (self._queue[0].deadline or now) <= now:
                refused.append(self._forget_queued(self._queue[0], dropped))
                self._counts["refused_busy"] += len(refused[-1])
            retry_after = self._expected_start()
            idle = self._take_idle_waiters()
        self._arm_timer()
        _call_dropped(dropped)
        message = f"waited {self.wait:g} s for a slot"
        for waiters in refused:
            _deliver(waiters, None, PoolBusy(message, retry_after))
        _deliver(idle, None, None)

    def _forget_queued(self, job: _Job, dropped: list[DropFn | None]) -> set[_Waiter]:
        """Drop a queued job that will never run; return its waiters and add its
        ``on_drop`` to ``dropped``, to be called once the lock is released."""
        self._dequeue(job)
        dropped.append(job.on_drop)
        job.state, job.fn, job.on_drop = "done", None, None
        del self._jobs[job.key]
        del self._callers[job.caller]
        waiters, job.waiters = job.waiters, set()
        return waiters

    def _leave(self, job: _Job, waiter: _Waiter) -> None:
        """A waiter gave up. A queued job left by everyone gives up its place."""
        with self._lock:
            if waiter not in job.waiters:
                return  # the job already ended and answered
            job.waiters.discard(waiter)
            if job.state != "queued" or job.waiters:
                return
            dropped: list[DropFn | None] = []
            self._forget_queued(job, dropped)
            self._counts["abandoned"] += 1
            idle = self._take_idle_waiters()
        _call_dropped(dropped)
        _deliver(idle, None, None)

    # --- closing ------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting (every new call gets PoolClosed); jobs in flight go on.
        Safe from any thread and from signal handlers' callbacks."""
        with self._lock:
            self._closed = True

    async def drain(self) -> None:
        """Stop accepting; let running and queued jobs finish, then return."""
        self.close()
        await self._until_idle()

    async def stop(self) -> None:
        """Stop accepting; refuse the queued and cancel the running, each sharer
        getting PoolClosed; return once every cancelled job has ended."""
        with self._lock:
            self._closed = self._stopping = True
            abandoned: set[_Waiter] = set()
            dropped: list[DropFn | None] = []
            while self._queue:
                abandoned |= self._forget_queued(self._queue[0], dropped)
            running = list(self._jobs.values())
            for job in running:
                abandoned |= job.waiters
                job.waiters = set()
            idle = self._take_idle_waiters()
        _call_dropped(dropped)
        _deliver(abandoned, None, PoolClosed("the pool was stopped"))
        _deliver(idle, None, None)
        call_in_job_loop(_cancel_tasks, running)
        await self._until_idle()

    async def _until_idle(self) -> None:
        waiter = _Waiter(asyncio.get_running_loop())
        with self._lock:
            if not self._jobs:
                return
            self._idle_waiters.append(waiter)
        try:
            await waiter.future
        finally:
            with self._lock:
                if waiter in self._idle_waiters:
                    self._idle_waiters.remove(waiter)

    def _take_idle_waiters(self) -> list[_Waiter]:
        """Waiters of drain/stop to wake now that nothing is in flight. Under the lock."""
        if self._jobs or not self._idle_waiters:
            return []
        waiters, self._idle_waiters = self._idle_waiters, []
        return waiters

    # --- estimates ----------------------------------------------------------

    def _expected_start(self) -> float:
        """Seconds until a new job could likely take a slot. Under the lock."""
        mean = self._run_times.mean(default=1.0)
        return mean * (len(self._queue) + 1) / self.slots

    def _expected_end(self, job: _Job) -> float:
        """Seconds until ``job`` likely ends. Under the lock."""
        mean = self._run_times.mean(default=1.0)
        if job.state == "running" and job.started_mono is not None:
            return max(0.0, mean - (time.monotonic() - job.started_mono))
        return mean * (self._queue.index(job) + 1) / self.slots + mean

    def __repr__(self) -> str:
        return (
            f"<Pool slots={self.slots} queue={self.queue_size} wait={self.wait} "
            f"running={self._running} queued={len(self._queue)}>"
        )


async def _run_job(job: _Job) -> Any:
    """The job's task: note that ``fn`` was called (see ``_finish``), then call it."""
    fn, job.ran = job.fn, True
    assert fn is not None  # a job's fn is let go only once it has ended
    return await _call(fn)


async def _call(fn: JobFn) -> Any:
    """A job's coroutine: an error even in calling ``fn`` stays inside the task."""
    try:
        return await fn()
    except (KeyboardInterrupt, SystemExit) as exc:
        # asyncio re-raises these out of the loop: they would stop every job in the process
        raise RuntimeError(f"the job raised {type(exc).__name__}") from exc


def _cancel_tasks(jobs: list[_Job]) -> None:
    """On the job loop (after each job's ``_spawn``): cancel the jobs' tasks."""
    for job in jobs:
        if job.task is not None:
            job.task.cancel()


def _call_dropped(callbacks: list[DropFn | None]) -> None:
    """Call each ``on_drop`` given; a failing one is logged, never raised."""
    for callback in callbacks:
        if callback is not None:
            try:
                callback()
            except Exception:
                logger.exception("a job's on_drop callback failed")


def _outcome(task: asyncio.Task[Any], stopping: bool) -> tuple[Any, BaseException | None]:
    """A finished job task's result or error; cancelled: PoolClosed when the pool is
    stopping, else an error saying so (never CancelledError: sharers were not cancelled)."""
    if task.cancelled():
        return None, PoolClosed("the pool was stopped") if stopping else _cancelled()
    error = task.exception()
    return (None, error) if error is not None else (task.result(), None)


def _cancelled() -> RuntimeError:
    return RuntimeError("the job was cancelled")


def _own_copy(error: BaseException) -> BaseException:
    """A fresh exception object for one sharer, chained to the original, so that
    sharers never share (and grow) one traceback."""
    try:
        duplicate = copy.copy(error)
    except Exception:  # an __init__ that its own args cannot call again
        try:
            duplicate = type(error).__new__(type(error))  # BaseException.__new__: no __init__
            duplicate.args = error.args
            duplicate.__dict__.update(getattr(error, "__dict__", {}))
        except Exception:
            return error  # better shared than lost
    duplicate.__cause__ = error
    duplicate.__context__ = None
    duplicate.__traceback__ = None
    return duplicate


def _deliver(
    waiters: set[_Waiter] | list[_Waiter], result: Any, error: BaseException | None
) -> None:
    """Settle each waiter's future on its own loop: one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[Any]]] = {}
    for waiter in waiters:
        by_loop.setdefault(waiter.loop, []).append(waiter.future)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: its callers are gone
            loop.call_soon_threadsafe(_settle, futures, result, error)


def _settle(futures: list[asyncio.Future[Any]], result: Any, error: BaseException | None) -> None:
    for future in futures:
        if future.done():  # cancelled meanwhile
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(_own_copy(error))


def _job_info(job: _Job, now: float, wall: float) -> JobInfo:
    started = job.started_mono if job.state == "running" else None
    return JobInfo.at(job.key, job.caller, len(job.waiters), job.queued_mono, started, now, wall)


def _log_error(key: str, error: BaseException) -> None:
    """The default observer: a fault nobody watches is still logged."""
    logger.warning("job %s failed: %r", key, error, exc_info=error)
