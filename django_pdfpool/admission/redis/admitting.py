"""Rules 1-3 and 4 on this process's side: a call is admitted by ``admit.lua`` and
registered with the job it now waits for; a caller that leaves is taken off its job
(``leave.lua``). Events that overtake an admission's reply wait in the table for it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from ...exceptions import PoolMisconfigured
from .. import delivery
from ..delivery import call_dropped, deliver
from ..ledger import Ledger
from ..protocol import DropFn, JobFn
from .calls import ScriptCalls
from .events import EventRouter
from .health import Health, unavailable
from .lifecycle import JobLifecycle
from .link import Link
from .modes import REDIS
from .records import Background, RedisJob, RedisWaiter, Terms
from .scripts import AdmitReply
from .table import JobTable

logger = logging.getLogger("django_pdfpool.redis")

GO_LOCAL = object()  # an admission's answer: Redis failed, take the fallback path


class Admitter:
    """Admits this process's calls and takes leaving callers off their jobs. Job loop only."""

    def __init__(
        self,
        terms: Terms,
        *,
        process: str,
        table: JobTable,
        link: Link,
        calls: ScriptCalls,
        health: Health,
        lifecycle: JobLifecycle,
        router: EventRouter,
        books: Ledger,
        tasks: Background,
        settle: Callable[[], None],
    ) -> None:
        self._terms, self._process, self._table, self._link = terms, process, table, link
        self._calls, self._health, self._lifecycle, self._router = calls, health, lifecycle, router
        self._books, self._tasks, self._settle = books, tasks, settle
        self._told_mismatch = False  # the deployment error is logged once per process

    # --- admission --------------------------------------------------------------

    def begin(
        self, waiter: RedisWaiter, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None
    ) -> None:
        """Start admitting a call; its waiter learns the outcome."""
        task = self._tasks.spawn(self._admit(waiter, key, caller, fn, on_drop))
        waiter.admission = task
        self._table.admitting(task)
        task.add_done_callback(self._admitted)

    def _admitted(self, task: asyncio.Task[None]) -> None:
        self._router.replay(self._table.admitted(task, self._terms.timeout))
        self._settle()

    async def _admit(
        self, waiter: RedisWaiter, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None
    ) -> None:
        job_id = self._table.new_id()
        if fn is not None:
            self._table.pending.add(job_id)
        try:
            try:
                if self._health.mode != REDIS:
                    raise RedisError("Redis failed a moment ago")
                await self._link.subscribe(self._router.on_event, self._health.failed)
                has_fn = "1" if fn is not None else "0"
                terms = self._terms
                raw = await self._link.call(
                    "admit",
                    str(terms.queue_size),
                    terms.wait_ms,
                    key,
                    caller,
                    job_id,
                    has_fn,
                    terms.fingerprint,
                    terms.deployment,
                )
                reply = AdmitReply.of(raw)
            except RedisError as error:
                if await self._health.judge(error):  # only a connection dropped: Redis is
                    call_dropped(on_drop)  # up, and whether the script ran is unknown
                    self._books.count("refused_busy")
                    deliver([waiter], None, unavailable("dropped", 1.0))
                    return
                waiter.handed_back = True  # the caller takes it to the fallback, or (gone) _leave
                deliver([waiter], GO_LOCAL, None)
                return
            except Exception as error:  # a bug: the caller must hear of it, not hang
                logger.exception("admitting a job failed")
                call_dropped(on_drop)
                deliver([waiter], None, error)
                return
            self._register(waiter, key, caller, fn, on_drop, job_id, reply)
        finally:
            self._table.pending.discard(job_id)
        for known in (job_id, reply.job_id):
            self._router.handle(self._table.take_held(known))
        self._router.handle(reply.events)

    def _register(
        self,
        waiter: RedisWaiter,
        key: str,
        caller: str,
        fn: JobFn | None,
        on_drop: DropFn | None,
        job_id: str,
        reply: AdmitReply,
    ) -> None:
        """Follow the admit script's answer (the rules are applied there)."""
        if reply.status == "joined":  # rule 1
            call_dropped(on_drop)  # joined: this call's fn is not needed
            self._books.count("joined")
            ended = self._table.recall(reply.job_id)  # it ended here while the reply travelled
            if ended is not None:
                deliver([waiter], *ended)
                return
            job = self._table.get(reply.job_id) or self._table.add(
                RedisJob(key, reply.job_id, reply.state)
            )
            lost = not job.owned and reply.job_id not in self._table.pending
            if reply.owner == self._process and lost:  # ours, from a call whose reply was lost
                self._tasks.spawn(self._lifecycle.drop(job, "lost"))
            job.waiters.add(waiter)
            waiter.job = job
        elif reply.status in ("started", "queued"):  # rule 3: a slot, or a queue place
            job = self._table.get(job_id) or self._table.add(RedisJob(key, job_id, "queued"))
            job.owned, job.caller, job.fn, job.on_drop = True, caller, fn, on_drop
            job.starter = waiter
            job.waiters.add(waiter)
            waiter.job = job
            if reply.status == "started":
                self._lifecycle.start(job)
            else:
                self._lifecycle.wait_for_slot(job)
        else:
            call_dropped(on_drop)
            deliver([waiter], None, self._refusal(key, reply))

    def _refusal(self, key: str, reply: AdmitReply) -> BaseException:
        if reply.status == "caller":  # rule 2
            self._books.count("refused_caller")
            running_for = reply.age if reply.state == "running" else None
            return delivery.caller_busy(self._books.expected_end(running_for, reply.queued))
        if reply.status == "busy":  # rule 3: a full queue
            self._books.count("refused_busy")
            return delivery.queue_full(self._books.expected_start(reply.queued))
        if reply.status == "mismatch":
            self._books.count("refused_busy")
            return self._mismatch(reply.differs)
        return delivery.nothing_to_join(key)

    def _mismatch(self, differs: dict[str, str]) -> PoolMisconfigured:
        """The namespace's live processes share other terms: a deployment error."""
        terms = self._terms
        ours: dict[str, tuple[str, Callable[[str], str]]] = {
            "slots": (str(terms.slots), str),
            "queue": (str(terms.queue_size), str),
            "wait": (terms.wait_ms, _seconds),
            "lease": (str(round(terms.lease * 1000)), _seconds),
        }
        named = [
            f"{name} {show(mine)} here, {show(differs[name])} there"
            for name, (mine, show) in ours.items()
            if name in differs
        ]
        if "fingerprint" in differs:
            named.append("the settings that change results differ (fingerprint)")
        if "deployment" in differs:
            error = PoolMisconfigured(
                f"Another deployment uses the Redis namespace {self._link.namespace!r}: its "
                "processes have another SECRET_KEY (or PDFPOOL['DEPLOYMENT']) than this one, "
                "so their pools are kept apart, not merged. Give each deployment a NAMESPACE "
                "of its own (or, for one deployment, the same SECRET_KEY everywhere).",
                terms.lease,
            )
        else:
            error = PoolMisconfigured(
                f"The PDF pool's processes sharing the Redis namespace "
                f"{self._link.namespace!r} have other settings than this one: "
                f"{'; '.join(named)}. Give them all the same settings, or each deployment a "
                "namespace of its own.",
                terms.lease,
            )
        if not self._told_mismatch:
            self._told_mismatch = True
            logger.error("PDF pool refuses every job: %s", error)
        return error

    # --- rule 4: leaving ------------------------------------------------------------

    def leave(self, waiter: RedisWaiter, done: concurrent.futures.Future[None]) -> None:
        """Take a caller that gave up off its job, here and in Redis; ``done`` once done."""
        self._tasks.spawn(self._leave(waiter, done))

    async def _leave(self, waiter: RedisWaiter, done: concurrent.futures.Future[Any]) -> None:
        try:
            if waiter.admission is not None and not waiter.admission.done():
                await asyncio.wait([waiter.admission])
            job = waiter.job
            if job is None and waiter.handed_back:  # it left before the fallback took it
                call_dropped(waiter.on_drop)
                return
            if job is None or waiter not in job.waiters:
                return  # refused, or answered as it left
            job.waiters.discard(waiter)
            starter = waiter is job.starter
            if starter:
                job.starter = None
            job.inflight += 1
            try:
                await self._calls.leave(job.key, job.id, 1, starter)
            finally:
                job.inflight -= 1
            if not job.owned and not job.waiters and self._table.holds(job):
                self._table.remove(job)  # nobody here waits on it any more
        finally:
            done.set_result(None)
            self._settle()


def _seconds(ms: str) -> str:
    """A duration as the scripts keep it (ms; -1: none), for a message."""
    return "none" if ms in ("", "-1") else f"{int(ms) / 1000:g} s"
