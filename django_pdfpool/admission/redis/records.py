"""What the job loop of a Redis-coordinated pool keeps per call and per job, its settings,
and its background tasks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from ..protocol import DropFn, ErrorObserver
from ..records import JobRecord, Waiter
from .codec import Decode, Encode


@dataclass(frozen=True)
class Terms:
    """A Redis pool's settings, as every part of it reads them."""

    slots: int
    queue_size: int
    wait: float | None
    lease: float
    fallback: str
    timeout: float
    on_error: ErrorObserver
    encode: Encode | None
    decode: Decode | None
    max_result_bytes: int
    fingerprint: str = ""  # opaque: the settings that change results, same in every process
    deployment: str = ""  # opaque: who this deployment is (never a secret), same likewise

    @property
    def wait_ms(self) -> str:
        """``wait`` as the scripts take it: milliseconds, -1 for none."""
        return "-1" if self.wait is None else str(round(self.wait * 1000))

    @property
    def beat_every(self) -> float:
        """Seconds between two renewals of the lease: three per lease."""
        return self.lease / 3

    @property
    def probe_every(self) -> float:
        """Seconds between two PINGs while Redis fails."""
        return min(1.0, self.lease / 2)


@dataclass
class Closing:
    """Whether the pool stopped accepting (``closed``) and is cancelling (``stopping``).
    Written by the pool's ``close``/``stop`` from any thread; read by the job loop."""

    closed: bool = False
    stopping: bool = False


class RedisWaiter(Waiter):
    """A call of this process; ``admission``, ``job`` and ``handed_back`` are set on the
    job loop. ``on_drop`` is the call's until its admission gives it to a job or calls it."""

    __slots__ = ("admission", "handed_back", "job", "on_drop")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_drop: DropFn | None) -> None:
        super().__init__(loop)
        self.on_drop = on_drop
        self.admission: asyncio.Task[None] | None = None
        self.job: RedisJob | None = None
        self.handed_back = False  # Redis failed: the call goes to the fallback (GO_LOCAL)


class RedisJob(JobRecord):
    """A job this process runs or queues (``owned``) or waits on. Job loop only."""

    __slots__ = (
        "collecting",
        "finishing",
        "gone_seen",
        "id",
        "inflight",
        "local_hold",
        "owned",
        "timer",
    )

    def __init__(self, key: str, job_id: str, state: str) -> None:
        super().__init__(key)
        self.id, self.state = job_id, state
        self.owned = False
        self.collecting = False  # its outcome is being read from Redis
        self.finishing = False  # its task ended: never to be counted again (see beat.lua)
        self.gone_seen = False  # the last beat did not find it in Redis
        self.inflight = 0  # scripts about it on their way: the beat does not judge it then
        self.timer: asyncio.TimerHandle | None = None  # its queue deadline, while queued
        # Redis failed while it ran: the fallback pool counts it until this ends it
        self.local_hold: Callable[[Any, BaseException | None], None] | None = None


class Background:
    """Tasks on the job loop, kept referenced until they end."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def quietly(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Spawn a call whose Redis failure changes nothing (clean-ups)."""
        self.spawn(_quietly(coroutine))


async def _quietly(coroutine: Coroutine[Any, Any, Any]) -> None:
    with contextlib.suppress(RedisError):
        await coroutine
