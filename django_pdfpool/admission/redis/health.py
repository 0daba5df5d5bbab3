"""Whether this process coordinates through Redis or falls back: the one owner of the mode.

A failed call switches to the fallback (one warning), ends what cannot wait for Redis, and
starts one probe per ``probe_every`` (a PING and a write) until Redis takes writes again
(docs/cluster.md). Redis unreachable and Redis refusing writes (out of memory, a read-only
replica, an ACL without the rights) are told apart, counted apart and worded apart."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from redis import exceptions as redis_errors

from ...exceptions import CoordinatorUnavailable
from .link import Link
from .modes import LOCAL_FALLBACK, REDIS, REFUSING
from .records import Background, Terms

logger = logging.getLogger("django_pdfpool.redis")

UNREACHABLE, REFUSED = "unreachable", "refused"  # why Redis fails: Health.trouble

# What a caller refused for want of Redis is told, worded once (CoordinatorUnavailable, 503)
_UNAVAILABLE = {
    UNREACHABLE: "The service cannot reach its coordinator; try again shortly.",
    REFUSED: "The service's coordinator does not take new work at the moment; try again shortly.",
    "dropped": "The service lost its coordinator for a moment; try again.",
    "waiting": "The service lost its coordinator while this job waited; try again shortly.",
}


def unavailable(why: str, retry_after: float) -> CoordinatorUnavailable:
    """The refusal for a call Redis cannot coordinate: ``why`` is ``Health.trouble``, or
    ``"dropped"`` (its connection dropped mid-call), or ``"waiting"`` (queued when Redis
    failed)."""
    return CoordinatorUnavailable(_UNAVAILABLE.get(why, _UNAVAILABLE[UNREACHABLE]), retry_after)


def trouble_of(error: BaseException) -> str:
    """``REFUSED`` when Redis answered with an error (OOM, READONLY, NOPERM, a wrong
    password, ...), ``UNREACHABLE`` when it did not answer at all."""
    if isinstance(error, redis_errors.AuthenticationError | redis_errors.AuthorizationError):
        return REFUSED
    if isinstance(error, redis_errors.ConnectionError | redis_errors.TimeoutError | OSError):
        return UNREACHABLE
    return REFUSED


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
        self.trouble: str | None = None  # UNREACHABLE or REFUSED while not REDIS
        self.last_error = ""  # the last failure, for the status page
        self.failures = {UNREACHABLE: 0, REFUSED: 0}  # switches to the fallback, by cause
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
        self.trouble = trouble_of(error)
        self.failures[self.trouble] += 1
        self.last_error = f"{type(error).__name__}: {error}"
        logger.warning(
            "PDF pool: Redis at %s %s (%s); %s",
            self._link.where,
            "refused a write" if self.trouble == REFUSED else "failed",
            self.last_error,
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
                    await self._link.probe()
                    await self._listen()
                except redis_errors.RedisError as error:
                    self.trouble = trouble_of(error)  # it may change: back, but read-only
                    self.last_error = f"{type(error).__name__}: {error}"
                    continue
                logger.warning(
                    "PDF pool: Redis at %s is back; limits are shared again", self._link.where
                )
                self.ok()
                self.mode, self.trouble = REDIS, None
                await self._on_up()
                return
        finally:
            self._probe = None
