"""Whether this process coordinates through Redis or falls back: the one owner of the mode.

A failed call switches to the fallback (one warning), ends what cannot wait for Redis, and
starts one PING per ``probe_every`` until Redis answers again (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from redis import exceptions as redis_errors

from .link import Link
from .modes import LOCAL_FALLBACK, REDIS, REFUSING
from .records import Background, Terms

logger = logging.getLogger("django_pdfpool.redis")


class Health:
    """The mode (``REDIS``, ``LOCAL_FALLBACK``, ``REFUSING``), when Redis last answered a
    beat, and the probe. Job loop only, but ``mode``, which any thread may read."""

    def __init__(
        self,
        terms: Terms,
        link: Link,
        tasks: Background,
        *,
        listen: Callable[[], Awaitable[None]],
        on_down: Callable[[], None],
        on_up: Callable[[], Awaitable[object]],
        is_retired: Callable[[], bool],
    ) -> None:
        self._terms, self._link, self._tasks = terms, link, tasks
        self._listen = listen  # subscribe to this process's channel again
        self._on_down = on_down  # Redis just failed: end what cannot wait for it
        self._on_up = on_up  # Redis is back: tell it at once what runs here
        self._is_retired = is_retired
        self.mode = REDIS
        self.last_ok = time.monotonic()  # when Redis last answered a beat
        self._probe: asyncio.Task[None] | None = None
        self._confirming: asyncio.Task[bool] | None = None  # is a failure only a dropped link?

    def ok(self) -> None:
        self.last_ok = time.monotonic()

    def silent_for(self) -> float:
        """Seconds since Redis last answered a beat."""
        return time.monotonic() - self.last_ok

    def failed(self, error: BaseException) -> None:
        """Redis failed a call: unless a fresh connection answers at once (only that
        connection was dropped), switch to the fallback until a probe succeeds."""
        self.judge(error)

    def judge(self, error: BaseException) -> asyncio.Future[bool]:
        """Whether Redis still answers after ``error`` (else the fallback is on): one
        judgement shared by every failure that arrives meanwhile."""
        if self.mode != REDIS or self._is_retired():
            judged: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            judged.set_result(self.mode == REDIS)
            return judged
        if self._confirming is None:
            self._confirming = self._tasks.spawn(self._confirm(error))
        return self._confirming

    async def _confirm(self, error: BaseException) -> bool:
        try:
            dropped = isinstance(error, redis_errors.ConnectionError)
            if dropped and not isinstance(error, redis_errors.TimeoutError):
                try:
                    await self._link.refresh_idle()
                    await self._link.ping()
                    await self._listen()  # the channel's connection may be the dropped one
                except redis_errors.RedisError:
                    pass
                else:
                    logger.info(
                        "PDF pool: a connection to Redis at %s was dropped (%s); a fresh one "
                        "answers",
                        self._link.where,
                        error,
                    )
                    self._confirming = None  # from here on, a failure is a new one
                    await self._on_up()  # Redis may have restarted: tell it what runs here
                    return True
            self._fall_back(error)
            return False
        finally:
            self._confirming = None

    def _fall_back(self, error: BaseException) -> None:
        if self.mode != REDIS or self._is_retired():
            return
        local = self._terms.fallback == "local"
        self.mode = LOCAL_FALLBACK if local else REFUSING
        logger.warning(
            "PDF pool: Redis at %s failed (%s: %s); %s",
            self._link.where,
            type(error).__name__,
            error,
            "new jobs run in this process's own pool, with per-process limits"
            if local
            else "new jobs are refused (503) until it is back",
        )
        self._tasks.quietly(self._link.reset())
        self._on_down()
        if self._probe is None:
            self._probe = self._tasks.spawn(self._watch())

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()

    async def _watch(self) -> None:
        try:
            while not self._is_retired():
                await asyncio.sleep(self._terms.probe_every)
                try:
                    await self._link.reset()
                    await self._link.ping()
                    await self._listen()
                except redis_errors.RedisError:
                    continue
                logger.warning(
                    "PDF pool: Redis at %s is back; limits are shared again", self._link.where
                )
                self.ok()
                self.mode = REDIS
                await self._on_up()
                return
        finally:
            self._probe = None
