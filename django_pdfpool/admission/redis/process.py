"""One process's side of a Redis-coordinated pool: its parts, wired together, and the
steps that concern all of them (idleness, stopping, shutting down). Made afresh in a
forked child: a process id, connections and job loop are never inherited."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import socket
from collections.abc import Coroutine
from typing import Any

from ..delivery import call_dropped, closing, deliver, stopped
from ..ledger import Ledger
from ..local import Pool
from ..protocol import DropFn, JobFn
from ..records import Waiter
from .admitting import Admitter
from .calls import ScriptCalls
from .events import EventRouter
from .health import Health
from .heartbeat import Heartbeat
from .lifecycle import JobLifecycle
from .link import Link, Sentinels
from .modes import REDIS
from .records import Background, Closing, RedisWaiter, Terms
from .table import JobTable


class ProcessSide:
    """The job loop's side of a ``RedisPool`` in this process; job loop only, but for the
    reads that ``table`` and ``health.mode`` allow from any thread."""

    def __init__(
        self,
        terms: Terms,
        *,
        url: str,
        namespace: str,
        books: Ledger,
        closing: Closing,
        fallback: Pool | None,
        sentinels: Sentinels = (),
    ) -> None:
        self._terms, self._closing = terms, closing
        self._fallback = fallback  # the pool new calls go to while Redis fails, if any
        self.pid = os.getpid()
        self.process = f"{socket.gethostname()}:{self.pid}:{secrets.token_hex(3)}"
        self.link = Link(
            url,
            namespace,
            self.process,
            lease=terms.lease,
            slots=terms.slots,
            timeout=terms.timeout,
            sentinels=sentinels,
        )
        self.tasks = Background()
        self.retired = False  # for good: unregistered from Redis, connections closed
        self._idle_waiters: list[Waiter] = []  # drain/stop waiting for nothing in flight
        self._release_timer: asyncio.TimerHandle | None = None  # idle: let go of Redis
        self.health = Health(
            terms,
            self.link,
            self.tasks,
            listen=self._listen,
            on_down=self._redis_down,
            on_up=lambda: self.heartbeat.beat_once(),
            is_retired=lambda: self.retired,
        )
        self.table = JobTable(on_added=lambda: self.heartbeat.ensure())
        self.calls = ScriptCalls(self.link, self.health, lambda events: self.router.handle(events))
        self.lifecycle = JobLifecycle(
            terms,
            table=self.table,
            calls=self.calls,
            link=self.link,
            health=self.health,
            books=books,
            closing=closing,
            tasks=self.tasks,
            settle=self.settle,
        )
        self.router = EventRouter(self.table, self.lifecycle, self.calls, self.link, self.tasks)
        self.heartbeat = Heartbeat(
            terms,
            table=self.table,
            calls=self.calls,
            health=self.health,
            lifecycle=self.lifecycle,
            tasks=self.tasks,
        )
        self.admitter = Admitter(
            terms,
            process=self.process,
            table=self.table,
            link=self.link,
            calls=self.calls,
            health=self.health,
            lifecycle=self.lifecycle,
            router=self.router,
            books=books,
            tasks=self.tasks,
            settle=self.settle,
        )

    async def _listen(self) -> None:
        await self.link.subscribe(self.router.on_event, self.health.failed)

    def _redis_down(self) -> None:
        """Redis failed: this process's queued jobs cannot get a slot from it, and its
        running jobs go on, counted by the fallback pool (their slots, keys and callers)."""
        for job in self.table.jobs():
            if job.owned and job.state == "queued":
                self.lifecycle.end(job, "unavailable")
            elif job.owned and self._fallback is not None and job.local_hold is None:
                job.local_hold = self._fallback.hold(job.key, job.caller)

    # --- entries from any thread (through call_soon_threadsafe) ------------------------

    def begin(
        self, waiter: RedisWaiter, key: str, caller: str, fn: JobFn | None, on_drop: DropFn | None
    ) -> None:
        if self.retired:  # closed between the caller's check and now
            call_dropped(on_drop)
            deliver([waiter], None, closing())
            return
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        self.admitter.begin(waiter, key, caller, fn, on_drop)

    def leave(self, waiter: RedisWaiter, done: concurrent.futures.Future[None]) -> None:
        self.admitter.leave(waiter, done)

    def add_idle_waiter(self, waiter: Waiter) -> None:
        self._idle_waiters.append(waiter)
        self.settle()

    # --- idle ---------------------------------------------------------------------

    def settle(self) -> None:
        """When nothing is in flight here: wake drain/stop, and after ``lease`` idle
        seconds let go of the process table entry and the channel."""
        if self.table.busy():
            return
        idle, self._idle_waiters = self._idle_waiters, []
        deliver(idle, None, None)
        if not self._closing.closed and self._release_timer is None and self.health.mode == REDIS:
            loop = asyncio.get_running_loop()
            self._release_timer = loop.call_later(self._terms.lease, self._release_if_idle)

    def _release_if_idle(self) -> None:
        self._release_timer = None

        def still_idle() -> bool:
            return not (self.table.busy() or self._closing.closed)

        if still_idle():
            self.tasks.quietly(self.link.release(still_idle))

    # --- stop and retire ----------------------------------------------------------------

    async def stop_jobs(self) -> None:
        """Cancel this process's running jobs, drop its queued ones, leave the others'."""
        while self.table.admissions:
            await asyncio.wait(set(self.table.admissions))
        calls: list[Coroutine[Any, Any, object]] = []
        for job in self.table.jobs():
            if job.owned and job.state == "running":
                waiters, job.waiters = job.waiters, set()
                deliver(waiters, None, stopped())
                if job.task is not None:
                    job.task.cancel()
            elif job.owned:
                calls.append(self.lifecycle.drop(job, "closed"))
            else:
                count = len(job.waiters)
                self.lifecycle.end(job, "closed")
                calls.append(self.calls.leave(job.key, job.id, count, False))
        await asyncio.gather(*calls)

    async def retire(self) -> None:
        """Leave Redis for good: unregister, stop the beat and the probe, close."""
        if self.retired:
            return
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        if self.link.used:
            await self.calls.unregister()
        self.retired = True
        self.health.stop()
        self.heartbeat.stop()
        await self.link.close()
