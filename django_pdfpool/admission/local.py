"""``Pool``: the admission rules in one process, under one ``threading.Lock``; jobs run on the
job loop, each caller is woken on its own loop. ``_admit`` applies the rules (docs/pool.md)."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import django_pdfpool.admission.jobs as jobs

from ..bounds import QUEUE, SLOTS, WAIT
from ..exceptions import CallerBusy, PoolBusy, PoolClosed
from .jobs import JobRecord, Waiter
from .ledger import ClusterSnapshot, Counter, Ledger, PoolSnapshot, Pressure
from .protocol import DropFn, ErrorObserver, JobFn


class Pool:
    """Admit jobs through ``slots`` running at once and a ``queue`` of waiting jobs; a queued
    job waits at most ``wait`` seconds (None: no limit). Its methods are ``AdmissionPool``'s."""

    blocking_reads = False  # ``pressure`` reads memory only

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
        self._books = Ledger(slots, run_time_ceiling, queue, wait)  # thread-safe on its own
        self._lock = threading.Lock()  # guards every field below, and each job's fields
        self._jobs: dict[str, JobRecord] = {}  # in flight, by key
        self._callers: dict[str, JobRecord] = {}  # in flight, by the caller that started it
        self._queue: deque[JobRecord] = deque()  # FIFO: a job's deadline is queued_mono + wait
        self._running = 0
        self._closed = False  # set without the lock too (``close``)
        self._idle_waiters: list[Waiter] = []  # drain/stop, woken once nothing is in flight
        jobs.forgotten_in_child.add(self)

    # --- reading ------------------------------------------------------------

    def running(self) -> int:
        return self._running

    def queued(self) -> int:
        return len(self._queue)

    def waiting(self, key: str) -> int:
        with self._lock:
            return 0 if (job := self._jobs.get(key)) is None else job.sharers()

    def pressure(self, key: str | None = None, caller: str | None = None) -> Pressure:
        with self._lock:
            # a held job may run past the slots (``hold``): the queue's places are still free
            free = max(0, self.slots - self._running) + self.queue_size - len(self._queue)
            in_flight = key is not None and key in self._jobs
            held = None if in_flight or caller is None else self._callers.get(caller)  # or joins
            retry = 0.0 if held is None else self._held_end(held, caller)
            sizes = tuple(job.size for job in self._jobs.values() if job.size is not None)
            known = sizes if sizes and len(sizes) == len(self._jobs) else None
            start = self._expected_start(caller)
            return Pressure(self._closed, free, in_flight, start, held is not None, retry, known)

    def count_refusal(
        self, refusal: PoolBusy | PoolClosed | CallerBusy, caller: str | None = None
    ) -> None:
        self._books.refused(Counter.refused(refusal), caller, refusal.retry_after)

    def _runs(self, now: float) -> tuple[list[float], list[int | None]]:  # under the lock
        """How long each running job has run, and its input's bytes (if known)."""
        runs = [
            (t, job.size) for job in self._jobs.values() if (t := job.running_for(now)) is not None
        ]
        return [t for t, _ in runs], [size for _, size in runs]

    def _held_end(self, held: JobRecord, caller: str | None) -> float:  # rule 2's; locked
        now = time.monotonic()  # a running job's end ignores the queue (Ledger.expected_end)
        ahead = self._queue.index(held) if held.state == "queued" else 0
        waited, (others, sizes) = now - held.queued_mono, self._runs(now)
        return self._books.expected_end(
            held.running_for(now), ahead, others, waited, caller=caller, size=held.size, sizes=sizes
        )

    def _expected_start(self, caller: str | None = None, *, start: bool = False) -> float:
        """The Retry-After until a newcomer is let in (``start``: takes a slot); locked."""
        now = time.monotonic()
        head = now - self._queue[0].queued_mono if self._queue else None
        running_for, sizes = self._runs(now)
        return self._books.expected_start(
            len(self._queue), running_for, head, start=start, caller=caller, sizes=sizes
        )

    def idle(self) -> bool:
        with self._lock:
            return not self._jobs

    def snapshot(self) -> PoolSnapshot:
        with self._lock:
            now, wall = time.monotonic(), time.time()
            infos = [job.info(now, wall) for job in self._jobs.values()]
            return self._books.snapshot(self.queue_size, self.wait, self._closed, infos)

    def cluster_snapshot(self) -> ClusterSnapshot | None:
        return None

    # --- running ------------------------------------------------------------

    async def run(
        self, key: str, caller: str, fn: JobFn | None, *, on_drop: DropFn | None = None,
        size: int | None = None,
    ) -> Any:  # fmt: skip
        loop, adopted = asyncio.get_running_loop(), False
        try:
            with self._lock:
                job, waiter = self._admit(key, caller, fn, on_drop, loop)
                job.size = job.size if job.size is not None else size
                adopted = job.starter is waiter  # this call made the job
        finally:
            if not adopted:  # refused, or joined: this call's fn is not needed
                jobs.call_dropped(on_drop)
        try:
            return await waiter.future
        except BaseException:  # leaving (cancelled, timed out) never stops the job for others
            self._leave(job, waiter)
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.exception()  # answered as we left: mark it retrieved
            raise

    def _admit(
        self, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None,
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[JobRecord, Waiter]:  # fmt: skip
        """Apply the rules, in order, to a new call; return the job it now waits for, and
        its place among the job's waiters (woken on ``loop``)."""
        if self._closed:  # Rule 0: closed.
            self._books.count(Counter.REFUSED_CLOSED)
            raise jobs.closing()
        job = self._jobs.get(key)
        if job is not None:  # Rule 1: join; no slot, no queue place, any caller.
            job.waiters.add(waiter := Waiter(loop))
            self._books.count(Counter.JOINED)
            return job, waiter
        if fn is None:
            raise jobs.nothing_to_join(key)
        held = self._callers.get(caller)  # Rule 2: one job per caller, even if its starter left
        full = self._running >= self.slots and len(self._queue) >= self.queue_size
        if held is not None or full:
            refusal: PoolBusy | CallerBusy = (  # Rule 3: a full queue refuses at once
                jobs.queue_full(self._expected_start(caller))
                if held is None
                else jobs.caller_busy(self._held_end(held, caller))
            )
            self.count_refusal(refusal, caller)
            raise refusal
        waiter = Waiter(loop)
        job = self._jobs[key] = self._callers[caller] = JobRecord(key, caller, fn, on_drop, waiter)
        if self._running < self.slots:
            self._start(job)
        else:
            self._queue.append(job)
            if self.wait is not None:
                jobs.call_in_job_loop(self._arm, job, self.wait)
        return job, waiter

    def _start(self, job: JobRecord) -> None:  # under the lock
        job.state, job.started_mono = "running", time.monotonic()
        self._running += 1
        self._books.started(job.started_mono - job.queued_mono)
        jobs.call_in_job_loop(self._spawn, job)

    def _spawn(self, job: JobRecord) -> None:  # on the job loop
        job.task = asyncio.get_running_loop().create_task(jobs.run_fn(job))
        job.task.add_done_callback(functools.partial(self._finish, job))

    def _finish(self, job: JobRecord, task: asyncio.Task[Any]) -> None:  # on the job loop
        result, error, _ = jobs.ended(job, task, self._books)
        self._answer(job, result, error)
        if error is not None and not job.cancelled(task):
            jobs.report_failure(self._on_error, job.key, error)

    def _answer(self, job: JobRecord, result: Any, error: BaseException | None) -> None:
        """On the job loop, with a job's outcome (its task's or a held job's): free the slot and
        the caller, forget the key (rule 5: no cache), start the queued, answer every sharer."""
        with self._lock:
            job.state = "done"
            del self._jobs[job.key]
            if self._callers.get(job.caller) is job:
                del self._callers[job.caller]
            self._running -= 1
            waiters, job.waiters = job.waiters, set()
            dropped: list[DropFn | None] = []
            while self._queue and self._running < self.slots:
                head = self._queue[0]
                if all(waiter.left() for waiter in head.waiters):  # a slot for nobody
                    self._forget_queued(head, dropped)
                    self._books.count(Counter.ABANDONED)
                else:
                    self._start(self._dequeue(head))
            idle: list[Waiter] = []  # drain/stop's: only a job's end can leave nothing in flight
            if not self._jobs:
                idle, self._idle_waiters = self._idle_waiters, []
        jobs.call_dropped(*dropped)
        jobs.deliver(waiters, result, error)
        jobs.deliver(idle, None, None)

    def hold(
        self, key: str, caller: str, size: int | None = None
    ) -> Callable[[Any, BaseException | None], None]:
        """Count a job running elsewhere in this process (a Redis pool's, when this pool takes
        over) as holding a slot (even past ``slots``), its key and its caller; return what
        ends it with its outcome, on the job loop."""
        with self._lock:
            if key in self._jobs:  # already this pool's: nothing more to count
                return lambda result, error: None
            job = self._jobs[key] = JobRecord(key, caller, size=size)  # no fn: not this pool's
            job.state, job.started_mono = "running", time.monotonic()
            self._callers.setdefault(caller, job)
            self._running += 1
        return functools.partial(self._answer, job)

    def _dequeue(self, job: JobRecord) -> JobRecord:  # its timer goes, on the job loop; locked
        self._queue.remove(job)
        if self.wait is not None:
            jobs.call_in_job_loop(job.disarm)
        return job

    def _arm(self, job: JobRecord, wait: float) -> None:
        """On the job loop: ``_expire`` once ``job`` has been queued ``wait`` seconds."""
        if job.state == "queued":  # else it left the queue before this ran
            delay = max(0.0, job.queued_mono + wait - time.monotonic())
            job.timer = asyncio.get_running_loop().call_later(delay, self._expire, job, wait)

    def _expire(self, job: JobRecord, wait: float) -> None:
        """On the job loop: rule 3, ``wait`` passed for the queue's head and any job behind it
        due as well (``job``, unless it left the queue); PoolBusy to every sharer of each."""
        refused: list[set[Waiter]] = []
        dropped: list[DropFn | None] = []
        with self._lock:
            now, waited = time.monotonic(), []
            while self._queue and (head := self._queue[0]).queued_mono + wait <= now:
                waiters = {w for w in self._forget_queued(head, dropped) if not w.left()}
                if waiters:
                    waited.append(now - head.queued_mono)
                    refused.append(waiters)
                else:
                    self._books.count(Counter.ABANDONED)
            if waited:
                self._books.gave_up(waited, sum(map(len, refused)))
            retry_after = self._expected_start(start=True)
        if job.state == "queued":  # the clock fired early
            self._arm(job, wait)
        jobs.call_dropped(*dropped)
        for waiters in refused:
            jobs.deliver(waiters, None, jobs.waited_too_long(wait, retry_after))

    def _forget_queued(self, job: JobRecord, dropped: list[DropFn | None]) -> set[Waiter]:
        """Drop a queued job that will never run (locked); its ``on_drop`` to ``dropped``."""
        self._dequeue(job)
        dropped.append(job.release())
        job.state = "done"
        del self._jobs[job.key]
        del self._callers[job.caller]
        waiters, job.waiters = job.waiters, set()
        return waiters

    def _leave(self, job: JobRecord, waiter: Waiter) -> None:
        """A waiter gave up (rule 4). A queued job left by everyone gives up its place."""
        if waiter not in job.waiters:  # answered: nothing to give up, and no lock to take (a
            return  # call whose loop closed is left to the GC, which may run under the lock)
        with self._lock:
            job.waiters.discard(waiter)
            if job.state != "queued" or job.waiters:
                return
            dropped: list[DropFn | None] = []
            self._forget_queued(job, dropped)
            self._books.count(Counter.ABANDONED)
        jobs.call_dropped(*dropped)

    # --- closing ------------------------------------------------------------

    def close(self) -> None:
        """Safe from any thread and from a signal handler: it takes no lock, which the thread
        it interrupts may hold (a call being admitted meanwhile was admitted before)."""
        self._closed = True

    async def drain(self) -> None:
        self.close()
        await self._until_idle()

    async def stop(self) -> None:
        """Refuse the queued and cancel the running, each sharer getting PoolClosed; return
        once every cancelled job has ended."""
        with self._lock:
            self._closed = True
            abandoned: set[Waiter] = set()
            dropped: list[DropFn | None] = []
            while self._queue:
                abandoned |= self._forget_queued(self._queue[0], dropped)
            running = list(self._jobs.values())
            for job in running:
                abandoned |= job.waiters
                job.waiters = set()
            self._books.count(Counter.REFUSED_CLOSED, sum(not w.left() for w in abandoned))
        jobs.call_dropped(*dropped)
        jobs.deliver(abandoned, None, jobs.stopped())
        jobs.call_in_job_loop(_stop_jobs, running)
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
            if waiter in self._idle_waiters:  # not woken (else no lock: see ``_leave``)
                with self._lock:
                    if waiter in self._idle_waiters:
                        self._idle_waiters.remove(waiter)

    def _forget(self) -> None:
        """In a forked child: the jobs in flight are the parent's, run on a loop the child
        lacks; forget them, and the locks a parent's thread may have held."""
        self._lock, self._books._lock = threading.Lock(), threading.Lock()
        self._jobs, self._callers, self._queue, self._idle_waiters = {}, {}, deque(), []
        self._running = 0

    def __repr__(self) -> str:
        return (
            f"<Pool slots={self.slots} queue={self.queue_size} wait={self.wait} "
            f"running={self._running} queued={len(self._queue)}>"
        )


def _stop_jobs(running: list[JobRecord]) -> None:
    """On the job loop (after each job's ``_spawn``): cancel the jobs' tasks."""
    for job in running:
        job.stop()
