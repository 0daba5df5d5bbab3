"""The lease (``beat.lua``): while this process holds or waits on anything, renew its lease
every ``lease/3`` s, have Redis reap the leases that ended, and catch up with any event
that did not arrive. The pool's only poll, and a bounded one (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import time

from .calls import ScriptCalls
from .health import Health
from .lifecycle import JobLifecycle
from .modes import REDIS
from .records import Background, RedisJob, Terms
from .scripts import JobReport
from .table import JobTable


class Heartbeat:
    """The beat task of this process; job loop only."""

    def __init__(
        self,
        terms: Terms,
        *,
        table: JobTable,
        calls: ScriptCalls,
        health: Health,
        lifecycle: JobLifecycle,
        tasks: Background,
    ) -> None:
        self._terms, self._table, self._calls = terms, table, calls
        self._health, self._lifecycle, self._tasks = health, lifecycle, tasks
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        """Beat while any job is in the table."""
        if self._task is None:
            self._task = self._tasks.spawn(self._beat())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _beat(self) -> None:
        delay = self._terms.beat_every
        try:
            while self._table.jobs():
                await asyncio.sleep(delay)
                delay = self._terms.beat_every
                if self._health.mode != REDIS:
                    if self._health.silent_for() > self._terms.lease:
                        for job in self._table.jobs():
                            if not job.owned:  # its outcome cannot reach us any more
                                self._lifecycle.end(job, "unavailable")
                    continue
                next_lease_end = await self.beat_once()
                if next_lease_end is not None:  # wake when it ends, to reap it at once
                    delay = min(delay, max(0.02, next_lease_end + 0.02))
        finally:
            self._task = None

    async def beat_once(self) -> float | None:
        """One beat now (also when Redis is back, before new work can arrive): return
        when the next other lease ends (seconds), None if none or Redis failed."""
        jobs = self._table.jobs()
        if not jobs:
            return None  # nothing to tell Redis (an idle process stays out of its table)
        now = time.monotonic()
        args = [str(self._table.seq), str(len(jobs))]
        for job in jobs:
            args += _job_args(job, now)
        args += [*self._table.pending, *self._table.dropping]
        reply = await self._calls.beat(*args)
        if reply is None:
            return None
        self._health.ok()
        for job, report in zip(jobs, reply.reports, strict=True):
            self._reconcile(job, report)
        return reply.next_lease_end

    def _reconcile(self, job: RedisJob, report: JobReport) -> None:
        """Bring a job in step with what Redis reports (a vanished one after two beats,
        so that an event still on its way wins)."""
        if not self._table.holds(job) or job.inflight:
            return
        if report.state == "done":
            job.collecting = True
            self._lifecycle.settle_remote(job, report.data)
            return
        if report.state != "gone":
            job.gone_seen = False
            if job.owned and report.state == "running" and job.state == "queued":
                self._lifecycle.start(job)  # its start event was lost
            elif not job.owned:
                job.state = report.state
            return
        if job.owned and job.state == "running":
            return  # its key is another job's now (see beat.lua): it finishes here
        if job.gone_seen:
            self._lifecycle.end(job, "lost")
        job.gone_seen = True


def _job_args(job: RedisJob, now: float) -> list[str]:
    """One job as beat.lua takes it: KEY ID ROLE CALLER WAITERS STARTER AGE_MS."""
    running_for = job.running_for(now)
    if not job.owned:
        return [job.key, job.id, "a", "", "0", "0", "0"]
    if running_for is None or job.finishing:  # queued, or over: never counted again
        return [job.key, job.id, "o", "", "0", "0", "0"]
    starter = "1" if job.starter in job.waiters else "0"
    age = str(round(running_for * 1000))
    return [job.key, job.id, "r", job.caller, str(len(job.waiters)), starter, age]
