"""``RedisPool``: the admission rules across the processes sharing a Redis namespace; the
callers' side, from any thread and loop (``side.ProcessSide`` runs on the job loop)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from redis.exceptions import RedisError

from ...bounds import CALL_TIMEOUT, FALLBACK, LEASE, NAMESPACE, integer
from ...exceptions import CallerBusy, CoordinatorUnavailable, PoolBusy, PoolClosed, Wording
from ..jobs import Waiter, call_dropped, call_in_job_loop, closing, get_job_loop, log_failure
from ..ledger import (
    ClusterSnapshot,
    CountedBy,
    Counter,
    Counters,
    DurationSummary,
    JobInfo,
    PoolSnapshot,
    Pressure,
    ProcessHold,
)
from ..local import Pool
from ..protocol import DropFn, ErrorObserver, JobFn
from .codec import Decode, Encode
from .link import Link, RedisPoolSettings, connect
from .side import GO_LOCAL, REDIS, REFUSED, Closing, ProcessSide, RedisWaiter

__all__ = ["MAX_RESULT_BYTES", "RedisPool"]

MAX_RESULT_BYTES = 16 << 20  # an outcome travelling to other processes, as JSON

_instances: weakref.WeakSet[RedisPool] = weakref.WeakSet()
T = TypeVar("T")


class RedisPool:
    """``Pool``'s rules over every process using ``url`` and ``namespace`` (docs/cluster.md)."""

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
        fingerprint: str = "",
        deployment: str = "",
        sentinels: Iterable[tuple[str, int]] = (),
        run_time_ceiling: float | None = None,
    ) -> None:
        # checks them as Pool does
        self._local = Pool(slots, queue, wait, on_error=on_error, run_time_ceiling=run_time_ceiling)
        LEASE.require("lease", lease)
        NAMESPACE.require("namespace", namespace)
        FALLBACK.require("fallback", fallback)
        integer(1024).require("max_result_bytes", max_result_bytes)
        CALL_TIMEOUT.require("timeout", timeout)
        for name, tag, most in ("fingerprint", fingerprint, 1024), ("deployment", deployment, 256):
            if not isinstance(tag, str) or len(tag) > most:
                raise ValueError(f"{name} must be a string of at most {most} characters")
        addresses = tuple((str(host), int(port)) for host, port in sentinels)
        for on_loop in (False, True):  # ValueError for a URL its connections refuse; none sent
            connect(url, addresses, timeout, on_loop=on_loop)
        self.slots, self.queue_size, self.wait = slots, queue, wait
        self.lease, self.namespace, self.fallback = float(lease), namespace, fallback
        self._settings = RedisPoolSettings(
            url=url,
            namespace=namespace,
            sentinels=addresses,
            slots=slots,
            queue_size=queue,
            wait=wait,
            lease=float(lease),
            timeout=float(timeout),
            on_error=on_error or log_failure,
            encode=encode,
            decode=decode,
            max_result_bytes=max_result_bytes,
            fingerprint=fingerprint,
            deployment=deployment,
        )
        self._books = self._local._books  # this process's, the fallback's too; thread-safe
        self._closing = Closing()  # see Closing
        self._side = self._new_side()  # replaced in a forked child (the fork hook, any thread)
        _instances.add(self)

    def _new_side(self) -> ProcessSide:
        """This process's side: at construction, and afresh in a forked child."""
        fallback = self._local if self.fallback == "local" else None
        return ProcessSide(self._settings, self._books, self._closing, fallback)

    @property
    def process(self) -> str:
        """This process's id in Redis: ``host:pid:tag``."""
        return self._side.process

    @property
    def mode(self) -> str:
        """``"redis"``, or while Redis fails ``"local-fallback"`` / ``"refusing"``."""
        return self._side.mode

    # --- reading ------------------------------------------------------------

    def _shared(self, read: Callable[[Link], T]) -> T | None:
        """A brief blocking read from Redis (any thread); None while Redis fails."""
        if self.mode == REDIS:
            try:
                return read(self._side.link)
            except RedisError as error:
                call_in_job_loop(self._side.failed, error)
        return None

    def running(self) -> int:
        """Jobs holding a slot, in every process (this process's while Redis fails)."""
        if (found := self._shared(Link.pressure)) is not None:
            return found.running
        return self._local.running() + self._side.owned("running")

    def queued(self) -> int:
        """Jobs waiting for a slot, in every process (this process's while Redis fails)."""
        found = self._shared(Link.pressure)
        return self._local.queued() + self._side.owned("queued") if found is None else found.queued

    def waiting(self, key: str) -> int:
        """Callers sharing ``key``'s job in every process, not counting its starter."""
        found = self._shared(lambda link: link.pressure(key))
        here = self._local.waiting(key)  # the fallback's: none unless its job still runs
        return self._side.sharers(key) + here if found is None else found.waiting + here

    blocking_reads = True  # the readings ask Redis

    def pressure(self, key: str | None = None, caller: str | None = None) -> Pressure:
        """``Pool.pressure`` for the cluster, one round trip (this process's while Redis fails)."""
        closed = self._closing.closed
        local = self._in_fallback(key, caller)
        found = None if local else self._shared(lambda link: link.pressure(key, caller))
        if found is None:
            reading = local or self._local.pressure(key, caller)
            refusing = self._refusal() if self.mode != REDIS and self.fallback == "refuse" else None
            return dataclasses.replace(reading, closed=closed, refusing=refusing)
        books, load = self._books, found.load
        books.observe(load.state)
        free = max(0, self.slots - found.running) + max(0, self.queue_size - found.queued)
        start = load.until_free(books, found.queued, caller)
        retry = 0.0
        if found.caller_busy:
            retry = load.until_end(books, found.state, found.age, found.ahead, caller)
        return Pressure(closed, free, found.in_flight, start, found.caller_busy, retry, found.sizes)

    def _in_fallback(self, key: str | None, caller: str | None) -> Pressure | None:
        """The fallback pool's reading when a call is its own though Redis is back: ``key``
        is in flight there (it joins) or ``caller`` holds a job there (CallerBusy)."""
        if self._local.idle():
            return None
        local = self._local.pressure(key, caller)
        return local if local.in_flight or local.caller_busy else None

    def count_refusal(
        self, refusal: PoolBusy | PoolClosed | CallerBusy, caller: str | None = None
    ) -> None:
        """Count a refusal the door gave: here, and a busy or caller one in Redis too."""
        counter = Counter.refused(refusal)
        self._books.refused(counter, caller, refusal.retry_after)
        if counter.counted_by is not CountedBy.PROCESS and self.mode == REDIS:
            call_in_job_loop(self._side.spawn, self._side._script("refused", counter))

    def idle(self) -> bool:
        """Nothing in flight in this process (``running()``/``queued()`` count every one)."""
        return not self._side.busy() and self._local.idle()

    def snapshot(self) -> PoolSnapshot:
        """Every job in flight in the namespace, with the cluster's books (or this process's)."""
        return self.cluster_snapshot().cluster

    def local_snapshot(self) -> PoolSnapshot:
        """The jobs this process runs or queues, its fallback pool's included (a job the
        fallback holds once, with its times from Redis mode and the sharers of both)."""
        now, wall = time.monotonic(), time.time()
        fallback = {info.key: info for info in self._local.snapshot().jobs}
        here = []
        for job in self._side.jobs():
            if job.owned:
                info = job.info(now, wall)
                if job.local_hold and (held := fallback.pop(job.key, None)) is not None:
                    info = dataclasses.replace(info, sharers=info.sharers + held.sharers)
                here.append(info)
        return self._snapshot([*here, *fallback.values()])

    def cluster_snapshot(self) -> ClusterSnapshot:
        """Cluster-wide and local snapshots, and who holds what, in one reading."""
        local = self.local_snapshot()
        view = self._shared(Link.view)
        cluster, processes = (local, ()) if view is None else parse_view(view, self._snapshot)
        side = self._side
        return ClusterSnapshot(
            mismatch="" if view is None else side.refused_for(view[6]),
            trouble=side.trouble,
            redis_error=side.last_error,
            unreachable=side.failures["unreachable"],
            refused_writes=side.failures["refused"],
            mode=self.mode,
            url=side.link.where,
            namespace=self.namespace,
            process=self.process,
            lease=self.lease,
            cluster=cluster,
            local=local,
            processes=processes,
        )

    def _snapshot(self, jobs: Iterable[JobInfo]) -> PoolSnapshot:
        return self._books.snapshot(self.queue_size, self.wait, self._closing.closed, jobs)

    # --- running ------------------------------------------------------------

    async def run(
        self, key: str, caller: str, fn: JobFn | None, *, on_drop: DropFn | None = None,
        size: int | None = None,
    ) -> Any:  # fmt: skip
        """``Pool.run`` across processes; exactly one of ``fn()`` and ``on_drop()`` is called."""
        if self._closing.closed:  # rule 0, per process: see drain()
            self._books.count(Counter.REFUSED_CLOSED)
            call_dropped(on_drop)
            raise closing()
        if self.mode != REDIS or self._in_fallback(key, caller):  # its jobs outlive an outage
            return await self._run_degraded(key, caller, fn, on_drop, size)
        waiter = RedisWaiter(asyncio.get_running_loop(), key, caller, fn, on_drop, size)
        call_in_job_loop(self._side.begin, waiter)
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
            return await self._run_degraded(key, caller, fn, on_drop, size)
        return result

    async def _run_degraded(
        self, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None, size: int | None
    ) -> Any:
        if self.fallback == "local":
            return await self._local.run(key, caller, fn, on_drop=on_drop, size=size)
        self._books.count(Counter.REFUSED_UNAVAILABLE)
        call_dropped(on_drop)
        raise self._refusal()

    def _refusal(self) -> CoordinatorUnavailable:
        """What every new call gets while Redis fails and the fallback refuses."""
        wording = Wording.NOT_TAKING if self._side.trouble == REFUSED else Wording.UNREACHABLE
        return CoordinatorUnavailable(wording, self._settings.probe_every)

    async def _leave(self, waiter: RedisWaiter) -> None:
        """Take ``waiter`` off its job, in Redis too; waited for, so counts read next are right."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        call_in_job_loop(self._side.spawn, self._side.leave(waiter, done))
        with contextlib.suppress(BaseException):  # cancelled again: the leave goes on
            await asyncio.shield(asyncio.wrap_future(done))

    # --- closing ------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting here (new calls get PoolClosed); jobs in flight go on."""
        self._closing.closed = True
        self._local.close()

    async def drain(self) -> None:
        """Stop accepting here, let this process's jobs and callers finish, let go of Redis."""
        self.close()
        await self._until_idle()
        await self._local.drain()
        await _on_job_loop(self._side.retire())

    async def stop(self) -> None:
        """Stop accepting here; drop this process's queued jobs, cancel its running ones."""
        self._closing.closed = self._closing.stopping = True
        await _on_job_loop(self._side.stop_jobs())
        await self._local.stop()
        await self._until_idle()
        await _on_job_loop(self._side.retire())

    async def _until_idle(self) -> None:
        waiter = Waiter(asyncio.get_running_loop())
        call_in_job_loop(self._side.add_idle_waiter, waiter)
        await waiter.future

    def __repr__(self) -> str:
        return (
            f"<RedisPool {self._side.link.where} namespace={self.namespace!r} "
            f"slots={self.slots} queue={self.queue_size} wait={self.wait} mode={self.mode}>"
        )


def parse_view(
    reply: Any, snapshot: Callable[[list[JobInfo]], PoolSnapshot]
) -> tuple[PoolSnapshot, tuple[ProcessHold, ...]]:
    """``view.lua``'s reply as ``snapshot(jobs)`` with the cluster's books, and who holds
    what; a field that is not what the scripts write (bad data) is skipped, never an error."""
    now, leases, flat, stats_flat, waits_ms, runs_ms, _ = reply
    now, wall = int(now) / 1000, time.time()
    jobs: list[JobInfo] = []
    owners: dict[str, str] = {}
    waits: dict[str, int] = {}
    for key, pairs in zip(flat[::2], flat[1::2], strict=False):
        fields = dict(zip(pairs[::2], pairs[1::2], strict=False))
        queued_ms = whole(fields.get("qt"))
        if queued_ms is None or key in owners:
            continue  # not a job as the scripts write one (or listed twice)
        started_ms = whole(fields.get("st")) if fields.get("state") == "running" else None
        sharers = 0
        for name, value in fields.items():
            if name.startswith("w:") and (count := whole(value) or 0) > 0:
                sharers += count
                waits[name[2:]] = waits.get(name[2:], 0) + count
        started = None if started_ms is None else started_ms / 1000
        caller = fields.get("caller", "")
        jobs.append(JobInfo.at(key, caller, sharers, queued_ms / 1000, started, now, wall))
        owners[key] = fields.get("owner", "")
    holders: list[ProcessHold] = []
    ends: dict[str, float] = {}
    for who, end in zip(leases[::2], leases[1::2], strict=False):
        with contextlib.suppress(ValueError, OverflowError):
            ends[who] = int(float(end)) / 1000
    for process in sorted(set(ends) | set(owners.values()) | set(waits)):
        host, pid, *_ = [*process.split(":"), ""]
        mine = [job for job in jobs if owners[job.key] == process]
        holders.append(
            ProcessHold(
                process=process,
                host=host,
                lease_left=ends.get(process, now) - now,
                pid=int(pid) if pid.isascii() and pid.isdigit() else 0,  # not int("²")
                running=tuple(job.key for job in mine if job.state == "running"),
                queued=tuple(job.key for job in mine if job.state == "queued"),
                waiting=waits.get(process, 0),
            )
        )
    pairs = zip(stats_flat[::2], stats_flat[1::2], strict=False)
    stats = {name: n for name, value in pairs if (n := whole(value)) is not None}
    since = stats.get("since")
    books = dataclasses.replace(
        snapshot(jobs),
        counters=Counters(**{c.value: n for c in Counter if (n := stats.get(c, -1)) >= 0}),
        queue_wait=DurationSummary.of(ms / 1000 for ms in map(whole, waits_ms) if ms is not None),
        run_time=DurationSummary.of(ms / 1000 for ms in map(whole, runs_ms) if ms is not None),
        scope="cluster",
        counted_since=None if since is None else wall - (now - since / 1000),  # wall clock
    )
    return books, tuple(holders)


def whole(value: Any) -> int | None:
    """A count or a time (ms) as the scripts store it, or None for anything else."""
    if isinstance(value, str | int) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return int(value)
    return None


async def _on_job_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, get_job_loop()))


def _after_fork() -> None:
    for pool in list(_instances):
        pool._side = pool._new_side()


os.register_at_fork(after_in_child=_after_fork)
