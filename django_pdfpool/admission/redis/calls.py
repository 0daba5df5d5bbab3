"""The mutating scripts, run as this process: each returns its named reply, hands its
events on, and turns a Redis failure into the fallback (None instead of a reply)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from redis.exceptions import RedisError

from .health import Health
from .link import Link
from .modes import REDIS
from .scripts import BeatReply, Event, EventsReply, ExpireReply, StatusReply

Reply = TypeVar("Reply", BeatReply, EventsReply, ExpireReply, StatusReply)


class ScriptCalls:
    """``leave``, ``finish``, ``expire``, ``drop``, ``beat`` and ``unregister`` for this
    process (``admit`` has its own ordering: see ``admitting``)."""

    def __init__(
        self, link: Link, health: Health, on_events: Callable[[list[Event]], None]
    ) -> None:
        self._link, self._health, self._on_events = link, health, on_events
        # Set while no beat is on its way. A finish waits for the beat in flight, whose
        # arguments may name the job as running: sent after it, the beat would count the
        # finished job again (beat.lua).
        self._no_beat = asyncio.Event()
        self._no_beat.set()
        self._beats = 0  # beats on their way

    async def _run(self, parse: Callable[[Any], Reply], name: str, *args: str) -> Reply | None:
        if self._health.mode != REDIS:
            return None
        try:
            reply = parse(await self._link.call(name, *args))
        except RedisError as error:
            self._health.failed(error)
            return None
        self._on_events(reply.events)
        return reply

    async def leave(self, key: str, job_id: str, n: int, starter: bool) -> StatusReply | None:
        """Rule 4: ``n`` callers of this process gave up on the job."""
        starts = "1" if starter else "0"
        return await self._run(StatusReply.of, "leave", key, job_id, str(n), starts)

    async def finish(
        self, key: str, job_id: str, outcome: str, took: float, data: str = ""
    ) -> StatusReply | None:
        """Rule 5: the job ended as ``outcome`` after running ``took`` seconds (both for
        the cluster's books); ``data`` is its outcome, once Redis says ``need``."""
        await self._no_beat.wait()
        took_ms = str(max(0, round(took * 1000)))
        return await self._run(StatusReply.of, "finish", key, job_id, data, outcome, took_ms)

    async def expire(self, key: str, job_id: str) -> ExpireReply | None:
        """Rule 3's wait: Redis's clock decides whether the queued job waited too long."""
        return await self._run(ExpireReply.of, "expire", key, job_id)

    async def drop(self, key: str, job_id: str, kind: str) -> EventsReply | None:
        """End a job of ours that will never run."""
        return await self._run(EventsReply.of, "drop", key, job_id, kind)

    async def beat(self, *args: str) -> BeatReply | None:
        """Renew the lease and report on each job (see beat.lua for ``args``)."""
        self._beats += 1
        self._no_beat.clear()
        try:
            return await self._run(BeatReply.of, "beat", *args)
        finally:
            self._beats -= 1
            if not self._beats:
                self._no_beat.set()

    async def unregister(self) -> EventsReply | None:
        """Leave the process table."""
        return await self._run(EventsReply.of, "unregister")
