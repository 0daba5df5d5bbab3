"""A job's life in this process, after admission: it starts when Redis gives it a slot,
finishes (``finish.lua``, rule 5), expires in the queue (``expire.lua``, rule 3's wait), is
dropped (``drop.lua``), or ends for another reason an event or the beat brings; sharers
here get the outcome, those in other processes read it (``collect.lua``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from ...exceptions import RunnerLost
from .. import delivery
from ..delivery import call_dropped, deliver, report_failure
from ..ledger import Ledger
from ..records import run_job
from .calls import ScriptCalls
from .codec import decode_outcome, encode_outcome
from .health import Health, unavailable
from .link import Link
from .records import Background, Closing, RedisJob, Terms
from .table import JobTable

LOST = "The worker running this job stopped before it finished; try again."

logger = logging.getLogger("django_pdfpool.redis")


class JobLifecycle:
    """Starts, finishes and ends this process's jobs, owned and awaited. Job loop only."""

    def __init__(
        self,
        terms: Terms,
        *,
        table: JobTable,
        calls: ScriptCalls,
        link: Link,
        health: Health,
        books: Ledger,
        closing: Closing,
        tasks: Background,
        settle: Callable[[], None],
    ) -> None:
        self._terms, self._table, self._calls, self._link = terms, table, calls, link
        self._health, self._books, self._closing, self._tasks = health, books, closing, tasks
        self._settle = settle  # something ended: wake drain/stop once nothing is in flight

    # --- an owned job: start, finish --------------------------------------------

    def start(self, job: RedisJob) -> None:
        """Run an owned job that has its slot, as a task on this loop."""
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        job.state = "running"
        job.started_mono = time.monotonic()
        self._books.started(job.started_mono - job.queued_mono)
        job.task = asyncio.get_running_loop().create_task(run_job(job))
        job.task.add_done_callback(lambda task: self._tasks.spawn(self._finish(job, task)))

    async def _finish(self, job: RedisJob, task: asyncio.Task[Any]) -> None:
        """Free the slot and the caller in Redis (handing the outcome to sharers in
        other processes), then answer this process's sharers."""
        job.finishing = True
        result, error = delivery.outcome_of(task, self._closing.stopping)
        call_dropped(job.release())  # stopped before fn was called: on_drop instead
        outcome = "cancelled" if task.cancelled() else "failed" if error else "completed"
        took = time.monotonic() - (job.started_mono or job.queued_mono)
        self._books.ended(outcome, took)
        job.inflight += 1
        try:
            reply = await self._calls.finish(job.key, job.id, outcome, took)
            if reply is not None and reply.status == "need":  # sharers elsewhere: send it
                terms = self._terms
                data = encode_outcome(
                    result, error, encode=terms.encode, limit=terms.max_result_bytes
                )
                await self._calls.finish(job.key, job.id, outcome, took, data)
        except Exception:  # a bug: the callers here are answered all the same, and the
            # beat frees the slot in Redis of a job this process no longer knows
            logger.exception("finishing job %s in Redis failed", job.key)
        finally:
            job.inflight -= 1
        self.answer(job, result, error)
        if error is not None and not task.cancelled():
            report_failure(self._terms.on_error, job.key, error)

    def answer(self, job: RedisJob, result: Any, error: BaseException | None) -> None:
        """Hand the outcome to this process's sharers; the job is over here."""
        self._table.remove(job)
        self._table.remember(job.id, result, error)
        waiters, job.waiters = job.waiters, set()
        deliver(waiters, result, error)
        if job.local_hold is not None:  # the fallback pool counted it: its joiners too
            job.local_hold(result, error)
            job.local_hold = None
        self._settle()

    # --- endings without a result ------------------------------------------------

    def end(self, job: RedisJob, kind: str) -> None:
        """A job ends without a result here (an event's ``kind``, or ``unavailable``):
        refuse or fail its waiters, let go of what an owned job that never ran owned."""
        if job.owned and job.state == "running":
            return  # its task runs on; its finish answers
        self._table.remove(job)
        waiters, job.waiters = job.waiters, set()
        if job.owned:
            call_dropped(job.release())
            if kind == "dropped":
                self._books.count("abandoned")
        waited = [time.monotonic() - job.queued_mono] if job.owned and kind == "busy" else []
        error = self._error_for(kind, len(waiters), waited)
        if error is not None:
            self._table.remember(job.id, None, error)
            if waiters:
                deliver(waiters, None, error)
        self._settle()

    def _error_for(self, kind: str, waiters: int, waited: list[float]) -> BaseException | None:
        """What the waiters of a job that ended as ``kind`` get (``dropped``: nobody waits);
        ``waited``: how long this process's job queued, for the queue-wait figures."""
        if kind == "busy":
            self._books.gave_up(waited, waiters)
            retry_after = self._books.expected_start(self._terms.queue_size)
            return delivery.waited_too_long(self._terms.wait, retry_after)
        if kind == "closed":
            return delivery.stopped()
        if kind == "unavailable":
            return unavailable("waiting", self._terms.probe_every)
        if kind == "expired":
            return RunnerLost("The job's result expired before it could be read; try again.")
        return None if kind == "dropped" else RunnerLost(LOST)

    async def drop(self, job: RedisJob, kind: str) -> None:
        """End a job of ours that will never run, here and in Redis."""
        self._table.dropping.add(job.id)
        try:
            self.end(job, kind)
            await self._calls.drop(job.key, job.id, kind)
        finally:
            self._table.dropping.discard(job.id)

    # --- rule 3's wait ----------------------------------------------------------------

    def wait_for_slot(self, job: RedisJob) -> None:
        """A queued owned job: check its deadline with Redis when ``wait`` has passed here."""
        if self._terms.wait is not None:
            self._arm(job, self._terms.wait)

    def _arm(self, job: RedisJob, delay: float) -> None:
        job.timer = asyncio.get_running_loop().call_later(delay, self._on_timer, job)

    def _on_timer(self, job: RedisJob) -> None:
        job.timer = None
        if self._table.holds(job) and job.state == "queued":
            self._tasks.spawn(self._expire(job))

    async def _expire(self, job: RedisJob) -> None:
        """Redis's clock decides; a ``busy`` event ends the job."""
        job.inflight += 1
        try:
            reply = await self._calls.expire(job.key, job.id)
        finally:
            job.inflight -= 1
        waiting = self._table.holds(job) and job.state == "queued"
        if reply is not None and reply.left > 0 and waiting:
            self._arm(job, reply.left)

    # --- an awaited job's outcome, from another process --------------------------------

    async def collect(self, job: RedisJob) -> None:
        """Read a finished job's outcome, once, and answer this process's sharers."""
        if job.collecting:
            return
        job.collecting = True
        job.inflight += 1
        try:
            data = await self._link.collect(job.id)
        except RedisError as error:
            job.collecting = False
            self._health.failed(error)
            return
        finally:
            job.inflight -= 1
        if self._table.holds(job):
            self.settle_remote(job, data)

    def settle_remote(self, job: RedisJob, data: str | None) -> None:
        """Answer this process's sharers with an outcome read from Redis."""
        if not data:
            self.end(job, "expired")
            return
        try:
            result, error = decode_outcome(data, decode=self._terms.decode)
        except Exception as exc:  # a broken decode hook, or a corrupt value
            result, error = None, exc
        self.answer(job, result, error)
