"""The job loop's side of ``RedisPool``: admission, events, leases, Redis failures.

Everything here runs on the job loop (``jobloop``) and is the only code that
touches a pool's ``_jobs``; the rules themselves are applied by the Lua scripts
(``redis_lua``), and this module keeps the process's side in step with them:

- ``_admit`` runs the admit script and registers the caller with the job it now
  waits for; ``_leave`` takes a caller that gave up off its job.
- Events (``start``, ``done``, ``busy``, ``lost``, ``dropped``, ``closed``) come
  in a script's reply or on the process's channel; one that arrives before the
  reply of the admission it concerns waits in ``_early`` for it.

Leases, Redis failing, idleness and closing are in ``redis_upkeep``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ...exceptions import CallerBusy, CoordinatorUnavailable, PoolBusy, PoolClosed, RunnerLost
from ..delivery import call_dropped as _call_dropped_many
from ..delivery import deliver as _deliver
from ..delivery import outcome_of as _outcome
from ..protocol import DropFn, JobFn
from ..records import run_job as _run_job
from .codec import decode_outcome, encode_outcome

if TYPE_CHECKING:
    from .pool import RedisPool

logger = logging.getLogger("django_pdfpool.redis")

REDIS, LOCAL_FALLBACK, REFUSING = "redis", "local-fallback", "refusing"
GO_LOCAL = object()  # an admission's answer: Redis failed, take the fallback path


class Waiter:
    """One awaiting caller: a future on its own loop; ``admission`` and ``job`` are
    the job loop's."""

    __slots__ = ("admission", "future", "job", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.admission: asyncio.Task[None] | None = None
        self.job: Job | None = None


class Job:
    """A job this process runs or queues (``owned``) or waits on; job loop only."""

    __slots__ = (
        "caller",
        "collecting",
        "fn",
        "gone_seen",
        "id",
        "inflight",
        "key",
        "on_drop",
        "owned",
        "queued_mono",
        "ran",
        "started_mono",
        "starter",
        "state",
        "task",
        "timer",
        "waiters",
    )

    def __init__(self, key: str, job_id: str, state: str) -> None:
        self.key, self.id, self.state = key, job_id, state
        self.owned = self.collecting = self.gone_seen = False
        self.caller = ""
        self.fn: JobFn | None = None
        self.on_drop: DropFn | None = None
        self.ran = False  # fn was called (a task cancelled before its first step never calls it)
        self.starter: Waiter | None = None
        self.waiters: set[Waiter] = set()
        self.inflight = 0  # scripts about it on their way: the beat does not judge it then
        self.queued_mono = time.monotonic()
        self.started_mono: float | None = None
        self.task: asyncio.Task[Any] | None = None
        self.timer: asyncio.TimerHandle | None = None


class JobLoopSide:
    """``RedisPool``'s methods that run on the job loop (a mixin: the state is the pool's)."""

    # --- plumbing -------------------------------------------------------------

    def _task(self: RedisPool, coroutine: Any) -> asyncio.Task[Any]:
        """A task on the job loop, kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _add(self: RedisPool, job: Job) -> Job:
        with self._lock:
            self._jobs[job.id] = job
        if self._beat_task is None:
            self._beat_task = self._task(self._beat())
        return job

    def _remove(self: RedisPool, job: Job) -> None:
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        with self._lock:
            if self._jobs.get(job.id) is job:
                del self._jobs[job.id]

    def _mine(self: RedisPool, job: Job) -> bool:
        return self._jobs.get(job.id) is job

    async def _call_script(self: RedisPool, name: str, *args: Any) -> Any:
        """Run a script and handle the events in its reply (last item); None if
        Redis failed (and the pool now falls back)."""
        if self._mode != REDIS:
            return None
        try:
            reply = await self._link.call(name, *args)
        except RedisError as error:
            self._failed(error)
            return None
        self._handle(reply[-1])
        return reply

    # --- admission ------------------------------------------------------------

    def _begin(
        self: RedisPool,
        waiter: Waiter,
        key: str,
        caller: str,
        fn: JobFn | None,
        on_drop: DropFn | None,
    ) -> None:
        if self._shut:  # closed between the caller's check and now
            _call_dropped_many(on_drop)
            _deliver([waiter], None, PoolClosed("the pool is closing and accepts no new work"))
            return
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        task = self._task(self._admit(waiter, key, caller, fn, on_drop))
        waiter.admission = task
        self._admissions.add(task)
        task.add_done_callback(self._admitted)

    def _admitted(self: RedisPool, task: asyncio.Task[None]) -> None:
        """An admission ended. Early events no admission can claim any more are strays:
        all of them once none is in flight, else those older than any reply can be."""
        self._admissions.discard(task)
        if not self._admissions:
            stale, self._early = self._early, {}
            self._finished.clear()
        else:
            old = time.monotonic() - 2 * self._timeout
            stale = {job_id: early for job_id, early in self._early.items() if early[0] < old}
            for job_id in stale:
                del self._early[job_id]
            for job_id in [i for i, (at, _, _) in self._finished.items() if at < old]:
                del self._finished[job_id]
        for job_id, (_, events) in stale.items():
            for kind, key in events:
                if job_id in self._jobs:
                    self._on_event(kind, key, job_id)
                else:
                    self._stray(kind, key, job_id)
        self._settle()

    async def _admit(
        self: RedisPool,
        waiter: Waiter,
        key: str,
        caller: str,
        fn: JobFn | None,
        on_drop: DropFn | None,
    ) -> None:
        self._seq += 1
        job_id = f"{self._seq}.{secrets.token_hex(4)}"  # numbered: see the beat
        if fn is not None:
            self._pending.add(job_id)
        try:
            try:
                if self._mode != REDIS:
                    raise RedisError("Redis failed a moment ago")
                await self._link.subscribe(self._on_message, self._failed)
                reply = await self._link.call(
                    "admit", str(self.queue_size), self._wait_ms, key, caller, job_id,
                    "1" if fn is not None else "0",
                )  # fmt: skip
            except RedisError as error:
                self._failed(error)
                _deliver([waiter], GO_LOCAL, None)
                return
            except Exception as error:  # a bug: the caller must hear of it, not hang
                logger.exception("admitting a job failed")
                _call_dropped_many(on_drop)
                _deliver([waiter], None, error)
                return
            status, a, b, c, events = reply
            self._register(waiter, key, caller, fn, on_drop, job_id, status, a, b, c)
        finally:
            self._pending.discard(job_id)
        for known in (job_id, a):
            for kind, event_key in self._early.pop(known, (0.0, []))[1]:
                self._on_event(kind, event_key, known)
        self._handle(events)

    def _register(
        self: RedisPool,
        waiter: Waiter,
        key: str,
        caller: str,
        fn: JobFn | None,
        on_drop: DropFn | None,
        job_id: str,
        status: str,
        a: str,
        b: str,
        c: str,
    ) -> None:
        """Act on the admit script's answer (the rules are applied there)."""
        if status == "joined":
            _call_dropped_many(on_drop)  # joined: this call's fn is not needed
            self._count("joined")
            if a in self._finished:  # it ended here while this reply was on its way
                _, result, error = self._finished[a]
                _deliver([waiter], result, error)
                return
            job = self._jobs.get(a) or self._add(Job(key, a, b))
            if c == self.process and not job.owned and a not in self._pending:
                self._task(self._drop(job, "lost"))  # ours, from a call whose reply was lost
            job.waiters.add(waiter)
            waiter.job = job
        elif status in ("started", "queued"):
            job = self._jobs.get(job_id) or self._add(Job(key, job_id, "queued"))
            job.owned, job.caller, job.fn, job.on_drop = True, caller, fn, on_drop
            job.starter = waiter
            job.waiters.add(waiter)
            waiter.job = job
            if status == "started":
                self._start(job)
            elif self.wait is not None:
                job.timer = asyncio.get_running_loop().call_later(self.wait, self._on_timer, job)
        else:
            _call_dropped_many(on_drop)
            error: BaseException
            if status == "caller":
                self._count("refused_caller")
                retry = self._expected_end(a, int(b) / 1000, int(c))
                error = CallerBusy("this caller already has a job in flight", retry)
            elif status == "busy":
                self._count("refused_busy")
                retry = self._expected_start(int(a))
                error = PoolBusy("every slot is taken and the queue is full", retry)
            else:
                error = ValueError(f"nothing to join for key {key!r}, and no fn to start a job")
            _deliver([waiter], None, error)

    # --- running and ending ---------------------------------------------------

    def _start(self: RedisPool, job: Job) -> None:
        """Run an owned job that has its slot, as a task on this loop."""
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        job.state = "running"
        job.started_mono = time.monotonic()
        with self._lock:
            self._counts["started"] += 1
            self._queue_waits.add(job.started_mono - job.queued_mono)
        assert job.fn is not None  # an owned job starts once, before it ends
        job.task = asyncio.get_running_loop().create_task(_run_job(job))
        job.task.add_done_callback(lambda task: self._task(self._finish(job, task)))

    async def _finish(self: RedisPool, job: Job, task: asyncio.Task[Any]) -> None:
        """Free the slot and the caller in Redis (handing the outcome to sharers in
        other processes), then answer this process's sharers."""
        result, error = _outcome(task, self._stopping)
        _call_dropped_many(None if job.ran else job.on_drop)  # stopped before fn was called
        job.fn = job.on_drop = None  # let go of what it owned
        with self._lock:
            self._run_times.add(time.monotonic() - (job.started_mono or job.queued_mono))
            outcome = "cancelled" if task.cancelled() else "failed" if error else "completed"
            self._counts[outcome] += 1
        job.inflight += 1
        try:
            reply = await self._call_script("finish", job.key, job.id, "")
            if reply is not None and reply[0] == "need":  # sharers elsewhere: send the outcome
                data = encode_outcome(
                    result, error, encode=self._encode, limit=self._max_result_bytes
                )
                await self._call_script("finish", job.key, job.id, data)
        finally:
            job.inflight -= 1
        self._answer(job, result, error)
        if error is not None and not task.cancelled():
            try:
                self._on_error(job.key, error)
            except Exception:
                logger.exception("the pool's on_error observer failed")

    def _answer(self: RedisPool, job: Job, result: Any, error: BaseException | None) -> None:
        self._remove(job)
        if self._admissions:
            self._finished[job.id] = (time.monotonic(), result, error)
        waiters, job.waiters = job.waiters, set()
        _deliver(waiters, result, error)
        self._settle()

    def _end(self: RedisPool, job: Job, kind: str) -> None:
        """A job ends without a result here: refuse or fail its waiters, let go of
        what an owned job that never ran owned."""
        if job.owned and job.state == "running":
            return  # its task runs on; its finish answers
        self._remove(job)
        waiters, job.waiters = job.waiters, set()
        if job.owned:
            dropped, job.fn, job.on_drop = job.on_drop, None, None
            _call_dropped_many(dropped)
            if kind == "dropped":
                self._count("abandoned")
        error: BaseException | None = None
        if kind == "busy":
            self._count("refused_busy", len(waiters))
            limit = f"{self.wait:g} s" if self.wait is not None else "too long"
            error = PoolBusy(f"waited {limit} for a slot", self._expected_start(self.queue_size))
        elif kind == "closed":
            error = PoolClosed("the pool was stopped")
        elif kind == "unavailable":
            error = CoordinatorUnavailable(
                "the coordinator of the pool failed while this job waited", self._probe_every
            )
        elif kind == "expired":
            error = RunnerLost("the job's result expired before it could be read")
        elif kind != "dropped":
            error = RunnerLost("the worker running this job stopped before it finished")
        if error is not None:
            if self._admissions:
                self._finished[job.id] = (time.monotonic(), None, error)
            if waiters:
                _deliver(waiters, None, error)
        self._settle()

    async def _drop(self: RedisPool, job: Job, kind: str) -> None:
        """End a job of ours that will never run, here and in Redis."""
        self._dropping.add(job.id)
        try:
            self._end(job, kind)
            await self._call_script("drop", job.key, job.id, kind)
        finally:
            self._dropping.discard(job.id)

    def _on_timer(self: RedisPool, job: Job) -> None:
        job.timer = None
        if self._mine(job) and job.state == "queued":
            self._task(self._expire(job))

    async def _expire(self: RedisPool, job: Job) -> None:
        """Rule 3's ``wait``: Redis's clock decides; a ``busy`` event ends the job."""
        job.inflight += 1
        try:
            reply = await self._call_script("expire", job.key, job.id)
        finally:
            job.inflight -= 1
        left = int(reply[0]) if reply is not None else -1
        if left > 0 and self._mine(job) and job.state == "queued":
            job.timer = asyncio.get_running_loop().call_later(left / 1000, self._on_timer, job)

    def _spawn_leave(
        self: RedisPool, waiter: Waiter, done: concurrent.futures.Future[None]
    ) -> None:
        self._task(self._leave_job(waiter, done))

    async def _leave_job(
        self: RedisPool, waiter: Waiter, done: concurrent.futures.Future[None]
    ) -> None:
        try:
            if waiter.admission is not None and not waiter.admission.done():
                await asyncio.wait([waiter.admission])
            job = waiter.job
            if job is None or waiter not in job.waiters:
                return  # refused, or answered as it left
            job.waiters.discard(waiter)
            starter = waiter is job.starter
            if starter:
                job.starter = None
            job.inflight += 1
            try:
                await self._call_script("leave", job.key, job.id, "1", "1" if starter else "0")
            finally:
                job.inflight -= 1
            if not job.owned and not job.waiters and self._mine(job):
                self._remove(job)  # nobody here waits on it any more
        finally:
            done.set_result(None)
            self._settle()

    # --- events ---------------------------------------------------------------

    def _on_message(self: RedisPool, event: tuple[str, str, str]) -> None:
        self._on_event(*event)

    def _handle(self: RedisPool, events: list[str]) -> None:
        for i in range(0, len(events), 3):
            self._on_event(events[i], events[i + 1], events[i + 2])

    def _on_event(self: RedisPool, kind: str, key: str, job_id: str) -> None:
        job = self._jobs.get(job_id)
        if job is None or (not job.owned and job_id in self._pending):
            if self._admissions:  # its admission's reply may still be on its way
                self._early.setdefault(job_id, (time.monotonic(), []))[1].append((kind, key))
            elif job is None:
                self._stray(kind, key, job_id)
            return
        if kind == "start":
            if job.owned and job.state == "queued":
                self._start(job)
        elif kind == "done":
            if not job.owned:
                self._task(self._collect(job))
        else:
            self._end(job, kind)

    def _stray(self: RedisPool, kind: str, key: str, job_id: str) -> None:
        """An event about a job this process no longer knows."""
        if kind == "done":  # nobody here waits any more: take our copy off the shelf
            self._task(self._quietly(self._link.collect(job_id)))
        elif kind == "start":  # ours, left from a call whose reply was lost: free the slot
            self._task(self._call_script("drop", key, job_id, "lost"))

    @staticmethod
    async def _quietly(coroutine: Any) -> None:
        with contextlib.suppress(RedisError):
            await coroutine

    async def _collect(self: RedisPool, job: Job) -> None:
        """Read a finished job's outcome, once, and answer this process's sharers."""
        if job.collecting:
            return
        job.collecting = True
        job.inflight += 1
        try:
            data = await self._link.collect(job.id)
        except RedisError as error:
            job.collecting = False
            self._failed(error)
            return
        finally:
            job.inflight -= 1
        if self._mine(job):
            self._settle_remote(job, data)

    def _settle_remote(self: RedisPool, job: Job, data: str | None) -> None:
        if not data:
            self._end(job, "expired")
            return
        try:
            result, error = decode_outcome(data, decode=self._decode)
        except Exception as exc:  # a broken decode hook, or a corrupt value
            result, error = None, exc
        self._answer(job, result, error)
