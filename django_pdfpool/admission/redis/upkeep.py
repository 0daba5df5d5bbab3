"""The job loop's upkeep of ``RedisPool``: leases, Redis failing, idleness, closing.

- ``_beat`` renews the process's lease while it holds or waits on anything, has
  Redis reap the leases that ended, and reconciles: a job whose event was lost
  is caught up within ``lease/3`` s (two beats for a vanished one, so that an
  event still on its way wins). This is the pool's only poll, and it is bounded.
- ``_failed`` switches the pool to its fallback; ``_probe`` (one PING a second)
  switches it back.
- ``_settle`` wakes drain/stop once nothing is in flight here, and after ``lease``
  idle seconds lets go of the process table entry and the channel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from ...exceptions import PoolClosed
from ..delivery import deliver as _deliver
from .jobs import LOCAL_FALLBACK, REDIS, REFUSING, Job, Waiter

if TYPE_CHECKING:
    from .pool import RedisPool

logger = logging.getLogger("django_pdfpool.redis")


class UpkeepSide:
    """``RedisPool``'s upkeep on the job loop (a mixin: the state is the pool's)."""

    # --- leases and reconciliation ----------------------------------------------

    async def _beat(self: RedisPool) -> None:
        """While this process holds or waits on anything: renew its lease, reap
        others', and catch up with any event that did not arrive."""
        delay = self._beat_every
        try:
            while self._jobs:
                await asyncio.sleep(delay)
                delay = self._beat_every
                if self._mode != REDIS:
                    if time.monotonic() - self._last_ok > self.lease:
                        for job in list(self._jobs.values()):
                            if not job.owned:  # its outcome cannot reach us any more
                                self._end(job, "unavailable")
                    continue
                jobs = list(self._jobs.values())
                args: list[str] = [str(self._seq), str(len(jobs))]
                for job in jobs:
                    args += [job.key, job.id, "o" if job.owned else "a"]
                args += [*self._pending, *self._dropping]
                reply = await self._call_script("beat", *args)
                if reply is None:
                    continue
                self._last_ok = time.monotonic()
                states = reply[1]
                for i, job in enumerate(jobs):
                    self._reconcile(job, states[2 * i], states[2 * i + 1])
                next_ms = int(reply[0])
                if next_ms >= 0:  # wake when the next lease ends, to reap it at once
                    delay = min(delay, max(0.02, next_ms / 1000 + 0.02))
        finally:
            self._beat_task = None

    def _reconcile(self: RedisPool, job: Job, state: str, data: str) -> None:
        if not self._mine(job) or job.inflight:
            return
        if state == "done":
            job.collecting = True
            self._settle_remote(job, data)
            return
        if state != "gone":
            job.gone_seen = False
            if job.owned and state == "running" and job.state == "queued":
                self._start(job)  # its start event was lost
            elif not job.owned:
                job.state = state
            return
        if job.owned and job.state == "running":
            return  # Redis forgot it (a restart, or our lease lapsed): it finishes here
        if job.gone_seen:
            self._end(job, "lost")
        job.gone_seen = True

    # --- Redis failing ----------------------------------------------------------

    def _failed(self: RedisPool, error: BaseException) -> None:
        """Redis failed a call: switch to the fallback until a probe succeeds."""
        if self._mode != REDIS or self._shut:
            return
        self._mode = LOCAL_FALLBACK if self.fallback == "local" else REFUSING
        logger.warning(
            "PDF pool: Redis at %s failed (%s: %s); %s",
            self._link.where,
            type(error).__name__,
            error,
            "new jobs run in this process's own pool, with per-process limits"
            if self.fallback == "local"
            else "new jobs are refused (503) until it is back",
        )
        self._task(self._quietly(self._link.reset()))
        for job in list(self._jobs.values()):
            if job.owned and job.state == "queued":
                self._end(job, "unavailable")
        if self._probe_task is None:
            self._probe_task = self._task(self._probe())

    async def _probe(self: RedisPool) -> None:
        try:
            while not self._shut:
                await asyncio.sleep(self._probe_every)
                try:
                    await self._link.reset()
                    await self._link.ping()
                    await self._link.subscribe(self._on_message, self._failed)
                except RedisError:
                    continue
                logger.warning("PDF pool: Redis at %s is back; limits are shared again",
                               self._link.where)  # fmt: skip
                self._last_ok = time.monotonic()
                self._mode = REDIS
                return
        finally:
            self._probe_task = None

    # --- idle, stop, shut down ------------------------------------------------

    def _settle(self: RedisPool) -> None:
        """When nothing is in flight here: wake drain/stop, and later let go of
        the channel (a busy process keeps it)."""
        if self._jobs or self._admissions:
            return
        idle, self._idle_waiters = self._idle_waiters, []
        _deliver(idle, None, None)
        if not self._closed and self._release_timer is None and self._mode == REDIS:
            self._release_timer = asyncio.get_running_loop().call_later(
                self._linger, self._release_if_idle
            )

    def _release_if_idle(self: RedisPool) -> None:
        self._release_timer = None
        if not self._jobs and not self._admissions and not self._closed:
            idle = lambda: not (self._jobs or self._admissions or self._closed)  # noqa: E731
            self._task(self._quietly(self._link.release(idle)))

    def _add_idle_waiter(self: RedisPool, waiter: Waiter) -> None:
        self._idle_waiters.append(waiter)
        self._settle()

    async def _stop_jobs(self: RedisPool) -> None:
        while self._admissions:
            await asyncio.wait(set(self._admissions))
        calls = []
        for job in list(self._jobs.values()):
            if job.owned and job.state == "running":
                waiters, job.waiters = job.waiters, set()
                _deliver(waiters, None, PoolClosed("the pool was stopped"))
                if job.task is not None:
                    job.task.cancel()
            elif job.owned:
                calls.append(self._drop(job, "closed"))
            else:
                count = len(job.waiters)
                self._end(job, "closed")
                calls.append(self._call_script("leave", job.key, job.id, str(count), "0"))
        await asyncio.gather(*calls)

    async def _shut_down(self: RedisPool) -> None:
        if self._shut:
            return
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        if self._link.used:
            await self._call_script("unregister")
        self._shut = True
        for task in (self._probe_task, self._beat_task):
            if task is not None:
                task.cancel()
        await self._link.close()
