"""``RedisPool``: the pool's rules across every process that shares a Redis namespace.

Same API and the same six rules as ``pool.Pool`` (see its docstring and
docs/pool.md), with the state that the rules read kept in Redis and changed only
by Lua scripts (``redis_lua``), so that slots, queue, single-flight and the one
job per caller hold across worker processes and hosts. What stays per process:

- Jobs run in the process that admitted them, on its job loop (rule 4 as in
  ``Pool``). The asyncio Redis client lives on that loop too (``redis_link``);
  a caller on any loop hands its call over and gets a future of its own, settled
  on its own loop. A cancelled caller leaves (one script) before its
  ``CancelledError`` propagates; it never cancels another's wait or the job.
- Wake-ups come from Redis: a script that frees a slot promotes the queue's head
  and publishes ``start`` on the owning process's channel; a finished job
  publishes ``done`` to each process with sharers, which then reads the outcome
  (JSON, ``codec``) once. Events for the calling process come back in the
  script's reply instead.
- Leases: a process holding or waiting on anything renews its lease every
  ``lease/3`` s (the beat). A process whose lease ends (SIGKILL, a hung loop,
  lost Redis) is reaped by the next script anyone runs: its slots, queue places
  and caller holds are freed and the sharers of its jobs get ``RunnerLost``.
  Beats of the survivors run when that lease ends, so this takes lease + a few ms.
- The beat is also the bounded fallback poll: it reports each job's state, so a
  lost pub/sub message (a reconnect) delays a wake-up by at most ``lease/3``.
- Closing is per process: ``drain()`` and ``stop()`` act on this process's jobs
  and callers, as a rolling restart of one worker needs; other processes go on.
- Redis failing (``fallback``): ``"refuse"`` answers new calls with
  ``CoordinatorUnavailable`` (a ``PoolBusy``: 503, retry later) and ``"local"``
  runs them in this process's own ``Pool`` (per-process limits, a logged
  warning). Either way ``mode`` tells, jobs already running finish and answer
  their callers here, queued ones get ``CoordinatorUnavailable``, and one PING
  per ``probe`` interval watches for Redis to come back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from redis.connection import parse_url
from redis.exceptions import RedisError

from ...exceptions import CoordinatorUnavailable, PoolClosed, RunnerLost
from ..delivery import call_dropped, log_failure
from ..jobloop import call_in_job_loop, get_job_loop
from ..ledger import RecentDurations as _Recent
from ..local import Pool
from ..protocol import DropFn, ErrorObserver, JobFn
from ..snapshot import ClusterSnapshot, Counters, JobInfo, PoolSnapshot
from ..snapshot import DurationSummary as Figures
from .codec import Decode, Encode
from .jobs import (
    GO_LOCAL,
    LOCAL_FALLBACK,
    REDIS,
    REFUSING,
    Job,
    JobLoopSide,
    Waiter,
)
from .link import Link
from .upkeep import UpkeepSide
from .view import parse_view

__all__ = [
    "LOCAL_FALLBACK",
    "REDIS",
    "REFUSING",
    "CoordinatorUnavailable",
    "RedisPool",
    "RunnerLost",
]

logger = logging.getLogger("django_pdfpool.redis")

FALLBACKS = ("refuse", "local")
MAX_RESULT_BYTES = 16 << 20  # an outcome travelling to other processes, as JSON


_instances: weakref.WeakSet[RedisPool] = weakref.WeakSet()


class RedisPool(JobLoopSide, UpkeepSide):
    """``Pool``'s rules over every process using ``url`` and ``namespace``.

    ``lease``: seconds a silent process keeps what it holds. ``encode``/``decode``:
    a result to and from plain JSON values, for sharers in other processes.
    ``fallback``: ``"refuse"`` or ``"local"`` while Redis fails. ``timeout``:
    seconds a Redis call may take before Redis counts as failing.
    """

    def __init__(
        self,
        slots: int = 2,
        queue: int = 4,
        wait: float | None = 10.0,
        *,
        url: str,
        namespace: str,
        lease: float = 5.0,
        on_error: ErrorObserver | None = None,
        encode: Encode | None = None,
        decode: Decode | None = None,
        max_result_bytes: int = MAX_RESULT_BYTES,
        fallback: str = "refuse",
        timeout: float = 1.0,
    ) -> None:
        self._local = Pool(slots, queue, wait, on_error=on_error)  # checks them as Pool does
        if not isinstance(lease, int | float) or not math.isfinite(lease) or lease < 0.1:
            raise ValueError(f"lease must be a number of seconds >= 0.1, not {lease!r}")
        if not isinstance(namespace, str) or not namespace or set(namespace) & set("{}"):
            raise ValueError(f"namespace must be a non-empty string without braces: {namespace!r}")
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, not {fallback!r}")
        if not isinstance(max_result_bytes, int) or max_result_bytes < 1024:
            raise ValueError(f"max_result_bytes must be an integer >= 1024: {max_result_bytes!r}")
        if not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        parse_url(url)  # ValueError for anything but redis://, rediss:// and unix://
        self.slots, self.queue_size, self.wait = slots, queue, wait
        self.lease, self.namespace, self.fallback = float(lease), namespace, fallback
        self._url, self._timeout = url, float(timeout)
        self._on_error = on_error or log_failure
        self._encode, self._decode, self._max_result_bytes = encode, decode, max_result_bytes
        self._wait_ms = "-1" if wait is None else str(round(wait * 1000))
        self._beat_every = self.lease / 3
        self._probe_every = min(1.0, self.lease / 2)
        self._linger = self.lease  # idle this long: leave the process table and the channel
        self._lock = threading.Lock()  # guards _jobs (read by snapshots) and _counts
        self._counts = dict.fromkeys(Counters.__dataclass_fields__, 0)
        self._queue_waits, self._run_times = _Recent(), _Recent()
        self._closed = self._stopping = False
        self._reset()
        _instances.add(self)

    def _reset(self) -> None:
        """Per-process state: at construction, and afresh in a forked child."""
        self._pid = os.getpid()
        self.process = f"{socket.gethostname()}:{self._pid}:{secrets.token_hex(3)}"
        self._link = Link(
            self._url,
            self.namespace,
            self.process,
            lease=self.lease,
            slots=self.slots,
            timeout=self._timeout,
        )
        self._mode = REDIS
        self._shut = False
        self._jobs: dict[str, Job] = {}  # by job id
        self._seq = 0  # numbers the job ids this process makes
        self._pending: set[str] = set()  # ids of jobs being admitted
        self._dropping: set[str] = set()  # ids of our jobs being dropped
        self._admissions: set[asyncio.Task[None]] = set()
        # events ahead of their admission's reply: id -> (first seen, [(kind, key)])
        self._early: dict[str, tuple[float, list[tuple[str, str]]]] = {}
        # outcomes of jobs that ended here, for a join whose reply comes after the end
        self._finished: dict[str, tuple[float, Any, BaseException | None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle_waiters: list[Waiter] = []
        self._beat_task: asyncio.Task[None] | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self._release_timer: asyncio.TimerHandle | None = None
        self._last_ok = time.monotonic()

    # --- reading ------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"redis"``, or while Redis fails ``"local-fallback"`` / ``"refusing"``."""
        return self._mode

    def running(self) -> int:
        """Jobs holding a slot, in every process (this process's while Redis fails)."""
        return self._read(
            self._link.running, lambda: self._local.running() + self._owned("running")
        )

    def queued(self) -> int:
        """Jobs waiting for a slot, in every process (this process's while Redis fails)."""
        return self._read(self._link.queued, lambda: self._local.queued() + self._owned("queued"))

    def waiting(self, key: str) -> int:
        """Callers sharing ``key``'s job in every process, not counting its starter."""
        return self._read(lambda: self._link.waiting(key), lambda: self._waiting_here(key))

    def _read(self, shared: Callable[[], int], here: Callable[[], int]) -> int:
        """One brief blocking read from Redis (any thread); this process's figure
        while Redis fails, without waiting for it."""
        if self._mode == REDIS:
            try:
                return shared()
            except RedisError as error:
                call_in_job_loop(self._failed, error)
        return here()

    def _waiting_here(self, key: str) -> int:
        with self._lock:
            jobs = [job for job in self._jobs.values() if job.key == key]
        mine = sum(len(job.waiters) - (job.starter in job.waiters) for job in jobs)
        return mine + self._local.waiting(key)

    def snapshot(self) -> PoolSnapshot:
        """Every job in flight in the namespace (this process's while Redis fails);
        counters and figures are this process's."""
        return self.cluster_snapshot().cluster

    def local_snapshot(self) -> PoolSnapshot:
        """The jobs this process runs or queues, its fallback pool's included."""
        now, wall = time.monotonic(), time.time()
        with self._lock:
            jobs = [_job_info(job, now, wall) for job in self._jobs.values() if job.owned]
        fallback = self._local.snapshot()
        jobs.extend(fallback.jobs)
        running = sum(job.state == "running" for job in jobs)
        return self._pool_snapshot(tuple(jobs), running, len(jobs) - running, fallback.counters)

    def cluster_snapshot(self) -> ClusterSnapshot:
        """Cluster-wide and local snapshots, and who holds what, in one reading."""
        local = self.local_snapshot()
        cluster, processes = local, ()
        if self._mode == REDIS:
            try:
                view = parse_view(self._link.view(), time.time())
            except RedisError as error:
                call_in_job_loop(self._failed, error)
            else:
                running = sum(job.state == "running" for job in view.jobs)
                cluster = self._pool_snapshot(view.jobs, running, len(view.jobs) - running)
                processes = view.processes
        return ClusterSnapshot(
            mode=self._mode,
            url=self._link.where,
            namespace=self.namespace,
            process=self.process,
            lease=self.lease,
            cluster=cluster,
            local=local,
            processes=processes,
        )

    def idle(self) -> bool:
        """Nothing in flight in this process: no job run or queued here, no caller of
        this process waiting (``running()``/``queued()`` count every process)."""
        with self._lock:
            busy = bool(self._jobs or self._admissions)
        return not busy and self._local.running() == 0 and self._local.queued() == 0

    def keys(self) -> list[str]:
        """Every Redis key of the namespace (SCAN): for tests and diagnostics."""
        return self._link.keys()

    def _pool_snapshot(
        self, jobs: tuple[JobInfo, ...], running: int, queued: int, extra: Counters | None = None
    ) -> PoolSnapshot:
        with self._lock:
            counts = dict(self._counts)
            waits, runs = list(self._queue_waits.samples), list(self._run_times.samples)
        if extra is not None:
            counts = {name: value + getattr(extra, name) for name, value in counts.items()}
        return PoolSnapshot(
            slots=self.slots,
            queue=self.queue_size,
            wait=self.wait,
            closed=self._closed,
            running=running,
            queued=queued,
            jobs=jobs,
            counters=Counters(**counts),
            queue_wait=Figures.of(waits),
            run_time=Figures.of(runs),
            taken_at=time.time(),
        )

    def _owned(self, state: str) -> int:
        with self._lock:
            return sum(job.owned and job.state == state for job in self._jobs.values())

    # --- running: the caller's side -------------------------------------------

    async def run(
        self, key: str, caller: str, fn: JobFn | None, *, on_drop: DropFn | None = None
    ) -> Any:
        """Run ``fn`` as the job for ``key`` on behalf of ``caller``, or share the job
        in flight for ``key`` in any process; return its result or raise its error.
        Exactly one of ``fn()`` and ``on_drop()`` is eventually called (see ``Pool``)."""
        if self._closed:  # rule 0, per process: see drain()
            self._count("refused_closed")
            call_dropped(on_drop)
            raise PoolClosed("the pool is closing and accepts no new work")
        if self._mode != REDIS:
            return await self._run_degraded(key, caller, fn, on_drop)
        waiter = Waiter(asyncio.get_running_loop())
        get_job_loop().call_soon_threadsafe(self._begin, waiter, key, caller, fn, on_drop)
        try:
            result = await waiter.future
        except BaseException:
            future = waiter.future
            if not future.done() or future.cancelled():
                await self._leave(waiter)  # rule 4: leaving never stops the job for others
            elif future.exception() is None and future.result() is GO_LOCAL:
                call_dropped(on_drop)  # left just as it was sent to the fallback
            raise
        if result is GO_LOCAL:
            return await self._run_degraded(key, caller, fn, on_drop)
        return result

    async def _run_degraded(
        self, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None
    ) -> Any:
        if self.fallback == "local":
            return await self._local.run(key, caller, fn, on_drop=on_drop)
        self._count("refused_busy")
        call_dropped(on_drop)
        raise CoordinatorUnavailable(
            "the coordinator of the pool cannot be reached", self._probe_every
        )

    async def _leave(self, waiter: Waiter) -> None:
        """Have the job loop take ``waiter`` off its job, in Redis too; wait for it,
        so that counts read right after a cancelled call are already right."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        get_job_loop().call_soon_threadsafe(self._spawn_leave, waiter, done)
        with contextlib.suppress(BaseException):  # cancelled again: the leave goes on
            await asyncio.shield(asyncio.wrap_future(done))

    # --- closing ------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting here (new calls get PoolClosed); jobs in flight go on."""
        self._closed = True
        self._local.close()

    async def drain(self) -> None:
        """Stop accepting here; let this process's running and queued jobs (and its
        callers waiting on others' jobs) finish, then let go of Redis. Other
        processes keep their pools open: closing is per process."""
        self.close()
        await self._until_idle()
        await self._local.drain()
        await self._on_job_loop(self._shut_down())

    async def stop(self) -> None:
        """Stop accepting here; this process's queued jobs are dropped, its running
        ones cancelled, its callers and every sharer of those jobs get PoolClosed."""
        self._closed = self._stopping = True
        await self._on_job_loop(self._stop_jobs())
        await self._local.stop()
        await self._until_idle()
        await self._on_job_loop(self._shut_down())

    async def _until_idle(self) -> None:
        waiter = Waiter(asyncio.get_running_loop())
        call_in_job_loop(self._add_idle_waiter, waiter)
        await waiter.future

    @staticmethod
    async def _on_job_loop(coroutine: Coroutine[Any, Any, None]) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, get_job_loop()))

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    # --- estimates ----------------------------------------------------------

    def _expected_start(self, queued: int) -> float:
        """Seconds until a new job could likely take a slot."""
        return self._run_times.mean(default=1.0) * (queued + 1) / self.slots

    def _expected_end(self, state: str, age: float, queued: int) -> float:
        """Seconds until a caller's job (running for ``age`` s, or queued) likely ends."""
        mean = self._run_times.mean(default=1.0)
        if state == "running":
            return max(0.0, mean - age)
        return self._expected_start(queued) + mean

    def __repr__(self) -> str:
        return (
            f"<RedisPool {self._link.where} namespace={self.namespace!r} slots={self.slots} "
            f"queue={self.queue_size} wait={self.wait} mode={self._mode}>"
        )

    # The job loop's side: admission and events in redis_jobs, the rest in redis_upkeep.


def _job_info(job: Job, now: float, wall: float) -> JobInfo:
    started = job.started_mono if job.state == "running" else None
    return JobInfo.at(job.key, job.caller, len(job.waiters), job.queued_mono, started, now, wall)


def _after_fork() -> None:
    for pool in list(_instances):
        pool._reset()


os.register_at_fork(after_in_child=_after_fork)
