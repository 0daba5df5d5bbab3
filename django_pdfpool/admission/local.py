"""``Pool``: the admission rules in one process, under one ``threading.Lock``; jobs run on the
job loop, each caller is woken on its own loop. ``_admit`` applies the rules (docs/pool.md)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..bounds import QUEUE, SLOTS, WAIT
from ..exceptions import CallerBusy, PoolBusy, PoolClosed
from . import jobs
from .jobs import JobRecord, Waiter, call_dropped, call_in_job_loop, deliver, report_failure, run_fn
from .ledger import ClusterSnapshot, Counter, Ledger, PoolSnapshot, Pressure
from .protocol import DropFn, ErrorObserver, JobFn


@dataclass(slots=True, eq=False)
class LocalJob(JobRecord):
    """A job of a local pool, guarded by the pool's lock (``task`` is set on the job loop)."""

    deadline: float | None = field(default=None, init=False)  # monotonic, queued with a wait


class Pool:
    """Admit jobs through ``slots`` running at once and a ``queue`` of waiting jobs; a queued
    job waits at most ``wait`` seconds (None: no limit). Its methods are ``AdmissionPool``'s."""

    def __init__(
        self,
        slots: int = 2,
        queue: int = 4,
        wait: float | None = 10.0,
        *,
        on_error: ErrorObserver | None = None,
        run_time_ceiling: float | None = None,
    ) -> None:
        SLOTS.require("slots", slots)
        QUEUE.require("queue", queue)
        WAIT.require("wait", wait)  # also refuses NaN
        self.slots, self.queue_size, self.wait = slots, queue, wait
        self._on_error = on_error or jobs.log_failure
        # counters and durations; thread-safe on its own
        self._books = Ledger(slots, run_time_ceiling)
        self._lock = threading.Lock()  # guards every field below
        self._jobs: dict[str, LocalJob] = {}  # in flight, by key
        self._callers: dict[str, LocalJob] = {}  # in flight, by the caller that started it
        self._queue: deque[LocalJob] = deque()
        self._running = 0
        self._closed = False
        self._stopping = False
        self._idle_waiters: list[Waiter] = []
        # One wait timer, for the head of the queue: every job waits the same `wait`
        # and the queue is FIFO, so deadlines grow along it. `_timer` lives on the job
        # loop (not under the lock); `_timer_wanted` says whether it should be armed.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_wanted = False

    # --- reading ------------------------------------------------------------

    def running(self) -> int:
        return self._running

    def queued(self) -> int:
        return len(self._queue)

    def waiting(self, key: str) -> int:
        with self._lock:
            job = self._jobs.get(key)
            return 0 if job is None else job.sharers()

    blocking_reads = False  # ``pressure`` reads memory only

    def pressure(self, key: str | None = None, caller: str | None = None) -> Pressure:
        with self._lock:
            free = max(0, self.slots + self.queue_size - self._running - len(self._queue))
            in_flight = key is not None and key in self._jobs
            held = None if in_flight else self._callers.get(caller or "")  # else it joins
            busy = (False, 0.0) if held is None or held.key == key else (True, self._held_end(held))
            return Pressure(self._closed, free, in_flight, self._expected_start(), *busy)

    def count_refusal(self, refusal: PoolBusy | PoolClosed | CallerBusy) -> None:
        self._books.count(Counter.refused(refusal))

    def _held_end(self, held: LocalJob) -> float:  # rule 2's Retry-After; under the lock
        ahead = self._queue.index(held) if held.state == "queued" else 0
        return self._books.expected_end(held.running_for(time.monotonic()), ahead)

    def _expected_start(self) -> float:
        """When a new job could likely take a slot. Under the lock."""
        now = time.monotonic()
        elapsed = [t for job in self._jobs.values() if (t := job.running_for(now)) is not None]
        return self._books.expected_start(len(self._queue), elapsed)

    def idle(self) -> bool:
        with self._lock:
            return not self._jobs

    def snapshot(self) -> PoolSnapshot:
        with self._lock:
            now, wall = time.monotonic(), time.time()
            return self._books.snapshot(
                queue=self.queue_size,
                wait=self.wait,
                closed=self._closed,
                jobs=[job.info(now, wall) for job in self._jobs.values()],
            )

    def cluster_snapshot(self) -> ClusterSnapshot | None:
        return None

    # --- running ------------------------------------------------------------

    async def run(
        self, key: str, caller: str, fn: JobFn | None, *, on_drop: DropFn | None = None
    ) -> Any:
        """``on_drop`` runs (on some thread) instead of ``fn`` when the call joined or was
        refused, or its queued job was dropped: what the job owns is always let go."""
        waiter = Waiter(asyncio.get_running_loop())
        try:
            with self._lock:
                job = self._admit(key, caller, fn, on_drop, waiter)
                adopted = job.starter is waiter  # this call made the job
        except BaseException:
            call_dropped(on_drop)
            raise
        if not adopted:
            call_dropped(on_drop)  # joined: this call's fn is not needed
        try:
            return await waiter.future
        except BaseException:
            # Leaving (cancelled, timed out) never stops the job for others.
            self._leave(job, waiter)
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.exception()  # answered as we left: mark it retrieved
            raise

    def _admit(
        self, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None, waiter: Waiter
    ) -> LocalJob:
        """Apply the rules, in order, to a new call; return the job it now waits for."""
        if self._closed:  # Rule 0: closed.
            self._books.count(Counter.REFUSED_CLOSED)
            raise jobs.closing()
        job = self._jobs.get(key)
        if job is not None:  # Rule 1: join; no slot, no queue place, any caller.
            job.waiters.add(waiter)
            self._books.count(Counter.JOINED)
            return job
        if fn is None:
            raise jobs.nothing_to_join(key)
        held = self._callers.get(caller)
        if held is not None:  # Rule 2: one job per caller, even if its starter left.
            self._books.count(Counter.REFUSED_CALLER)
            raise jobs.caller_busy(self._held_end(held))
        if self._running >= self.slots and len(self._queue) >= self.queue_size:
            self._books.count(Counter.REFUSED_BUSY)  # Rule 3: a full queue refuses at once.
            raise jobs.queue_full(self._expected_start())
        job = LocalJob(key, caller, fn, on_drop, waiter)
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

    def _start(self, job: LocalJob, *, on_job_loop: bool = False) -> None:
        """Give ``job`` a slot and run it on the job loop. Under the lock."""
        job.state = "running"
        job.started_mono = time.monotonic()
        self._running += 1
        self._books.started(job.started_mono - job.queued_mono)
        if on_job_loop:
            self._spawn(job)
        else:
            call_in_job_loop(self._spawn, job)

    def _spawn(self, job: LocalJob) -> None:
        """On the job loop: run the job as a task; its ending is handled in ``_finish``."""
        job.task = asyncio.get_running_loop().create_task(run_fn(job))
        job.task.add_done_callback(lambda task: self._finish(job, task))

    def _finish(self, job: LocalJob, task: asyncio.Task[Any]) -> None:
        """On the job loop: the job's task ended; its outcome to every sharer."""
        result, error = jobs.outcome_of(task, self._stopping)
        outcome = Counter.ended(task.cancelled(), error)
        self._end(job, result, error, outcome)
        if error is not None and not task.cancelled():
            report_failure(self._on_error, job.key, error)

    def _end(
        self, job: LocalJob, result: Any, error: BaseException | None, outcome: Counter | None
    ) -> None:
        """On the job loop: free the slot and the caller, forget the key (rule 5: no
        cache), start what the queue holds, and hand the outcome to every sharer."""
        with self._lock:
            dropped = job.release()  # stopped before fn was called: on_drop instead
            job.state = "done"
            del self._jobs[job.key]
            if self._callers.get(job.caller) is job:
                del self._callers[job.caller]
            self._running -= 1
            if outcome is not None:
                took = time.monotonic() - (job.started_mono or job.queued_mono)
                self._books.ended(outcome, took)
            waiters, job.waiters = job.waiters, set()
            while self._queue and self._running < self.slots:
                self._start(self._dequeue(self._queue[0]), on_job_loop=True)
            idle = self._take_idle_waiters()
        call_dropped(dropped)
        deliver(waiters, result, error)
        deliver(idle, None, None)

    def hold(self, key: str, caller: str) -> Callable[[Any, BaseException | None], None]:
        """Count a job running elsewhere in this process as one of this pool's: it holds a
        slot (even past ``slots``: it runs already), its key and its caller, and calls for
        its key join it. For a Redis pool's jobs when Redis fails and this pool takes over.
        Return the function, to be called on the job loop, that ends it with its outcome."""
        with self._lock:
            if key in self._jobs:  # already this pool's: nothing more to count
                return lambda result, error: None
            job = LocalJob(key, caller, None, None, None)
            job.ran = True  # its fn is not this pool's to call, nor an on_drop
            job.state, job.started_mono = "running", time.monotonic()
            self._jobs[key] = job
            self._callers.setdefault(caller, job)
            self._running += 1
        return lambda result, error: self._end(job, result, error, None)

    def _dequeue(self, job: LocalJob) -> LocalJob:
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
        refused: list[set[Waiter]] = []
        dropped: list[DropFn | None] = []
        with self._lock:
            now = time.monotonic()
            waited: list[float] = []
            while self._queue and (self._queue[0].deadline or now) <= now:
                waited.append(now - self._queue[0].queued_mono)
                refused.append(self._forget_queued(self._queue[0], dropped))
            self._books.gave_up(waited, sum(map(len, refused)))
            retry_after = self._expected_start()
            idle = self._take_idle_waiters()
        self._arm_timer()
        call_dropped(*dropped)
        for waiters in refused:
            deliver(waiters, None, jobs.waited_too_long(self.wait, retry_after))
        deliver(idle, None, None)

    def _forget_queued(self, job: LocalJob, dropped: list[DropFn | None]) -> set[Waiter]:
        """Drop a queued job that will never run; return its waiters and add its
        ``on_drop`` to ``dropped``, to be called once the lock is released."""
        self._dequeue(job)
        dropped.append(job.release())
        job.state = "done"
        del self._jobs[job.key]
        del self._callers[job.caller]
        waiters, job.waiters = job.waiters, set()
        return waiters

    def _leave(self, job: LocalJob, waiter: Waiter) -> None:
        """A waiter gave up (rule 4). A queued job left by everyone gives up its place."""
        with self._lock:
            if waiter not in job.waiters:
                return  # the job already ended and answered
            job.waiters.discard(waiter)
            if job.state != "queued" or job.waiters:
                return
            dropped: list[DropFn | None] = []
            self._forget_queued(job, dropped)
            self._books.count(Counter.ABANDONED)
            idle = self._take_idle_waiters()
        call_dropped(*dropped)
        deliver(idle, None, None)

    # --- closing ------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting (every new call gets PoolClosed); jobs in flight go on.
        Safe from any thread and from signal handlers' callbacks."""
        with self._lock:
            self._closed = True

    async def drain(self) -> None:
        self.close()
        await self._until_idle()

    async def stop(self) -> None:
        """Stop accepting; refuse the queued and cancel the running, each sharer
        getting PoolClosed; return once every cancelled job has ended."""
        with self._lock:
            self._closed = self._stopping = True
            abandoned: set[Waiter] = set()
            dropped: list[DropFn | None] = []
            while self._queue:
                abandoned |= self._forget_queued(self._queue[0], dropped)
            running = list(self._jobs.values())
            for job in running:
                abandoned |= job.waiters
                job.waiters = set()
            idle = self._take_idle_waiters()
        call_dropped(*dropped)
        deliver(abandoned, None, jobs.stopped())
        deliver(idle, None, None)
        call_in_job_loop(_cancel_tasks, running)
        await self._until_idle()

    async def _until_idle(self) -> None:
        waiter = Waiter(asyncio.get_running_loop())
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

    def _take_idle_waiters(self) -> list[Waiter]:
        """Waiters of drain/stop to wake now that nothing is in flight. Under the lock."""
        if self._jobs or not self._idle_waiters:
            return []
        waiters, self._idle_waiters = self._idle_waiters, []
        return waiters

    def __repr__(self) -> str:
        return (
            f"<Pool slots={self.slots} queue={self.queue_size} wait={self.wait} "
            f"running={self._running} queued={len(self._queue)}>"
        )


def _cancel_tasks(jobs: list[LocalJob]) -> None:
    """On the job loop (after each job's ``_spawn``): cancel the jobs' tasks."""
    for job in jobs:
        if job.task is not None:
            job.task.cancel()
