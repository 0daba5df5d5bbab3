"""``RedisPool``'s connections to Redis: an asyncio client on the job loop for the scripts
and the process's event channel, a small synchronous one for reads from any thread.

Scripts are never retried (one whose reply was lost may have run); a failed call raises
``RedisError`` and the pool decides what that means (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from ...exceptions import BlockingCallWarning
from ..jobloop import on_job_loop
from .scripts import MUTATING, SOURCES, Event
from .urls import presentable

logger = logging.getLogger("django_pdfpool.redis")

MAX_CONNECTIONS = 16  # per pool, on the job loop; callers beyond wait for one


class Link:
    """The connections of one pool (one process id, one namespace) to one Redis."""

    def __init__(
        self, url: str, namespace: str, process: str, *, lease: float, slots: int, timeout: float
    ) -> None:
        self.url, self.namespace = url, namespace
        self.prefix = "{" + namespace + "}:"
        self.process = process
        self.procs_key = self.prefix + "procs"
        self.channel = self.prefix + "ch:" + process
        self._head = [process, str(round(lease * 1000)), str(slots)]
        self._timeout = timeout
        self._client: aredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._subscribing: asyncio.Lock | None = None
        self._sync_lock = threading.Lock()
        self._sync: redis.Redis | None = None
        self._sync_scripts: dict[str, Any] = {}

    @property
    def where(self) -> str:
        """The URL without its secrets, for logs and status pages (``urls.presentable``)."""
        return presentable(self.url)

    @property
    def used(self) -> bool:
        """Whether the asyncio client was ever made (a pool never used has nothing to undo)."""
        return self._client is not None

    # --- on the job loop ------------------------------------------------------

    def client(self) -> aredis.Redis:
        """The asyncio client; made on first use, on the job loop."""
        if self._client is None:
            pool = aredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=MAX_CONNECTIONS,
                timeout=self._timeout,
                decode_responses=True,
                socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
                retry=AsyncRetry(NoBackoff(), 0),
            )
            self._client = aredis.Redis(connection_pool=pool)
            self._scripts = {
                name: self._client.register_script(SOURCES[name]) for name in (*MUTATING, "collect")
            }
        return self._client

    async def call(self, name: str, *args: Any) -> Any:
        """Run a mutating script as this process; its reply as Redis gives it."""
        self.client()
        return await self._scripts[name](keys=[self.procs_key], args=[*self._head, *args])

    async def collect(self, job_id: str) -> str | None:
        """Take this process's copy of a finished job's outcome (JSON), or None."""
        self.client()
        outcome: str | None = await self._scripts["collect"](
            keys=[self.prefix + "res:" + job_id], args=[self.process]
        )
        return outcome

    async def ping(self) -> None:
        await self.client().ping()

    async def subscribe(
        self, on_event: Callable[[Event], None], on_error: Callable[[BaseException], None]
    ) -> None:
        """Listen on this process's channel, unless already listening. Returns once
        Redis confirmed the subscription: no event published after can be missed."""
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if self._reader is not None and not self._reader.done():
                return
            await self._unsubscribe()
            pubsub = self.client().pubsub()
            try:
                await pubsub.subscribe(self.channel)
                while True:
                    message = await pubsub.get_message(timeout=self._timeout)
                    if message is None:
                        raise redis.exceptions.TimeoutError("no confirmation of SUBSCRIBE")
                    if message["type"] == "subscribe":
                        break
            except BaseException:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                raise
            self._pubsub = pubsub
            self._reader = asyncio.get_running_loop().create_task(
                self._read(pubsub, on_event, on_error)
            )

    async def _read(
        self,
        pubsub: Any,
        on_event: Callable[[Event], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        try:
            while True:
                message = await pubsub.get_message(timeout=None)
                if message is None or message.get("type") != "message":
                    continue
                try:
                    kind, key, job_id = json.loads(message["data"])
                except (TypeError, ValueError):
                    logger.warning("ignored a malformed pool event: %r", message["data"])
                    continue
                on_event(Event(str(kind), str(key), str(job_id)))
        except (RedisError, OSError) as error:
            on_error(error)

    async def unsubscribe(self) -> None:
        """Stop listening (idle, failing or closing); ``subscribe`` starts again."""
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        reader, pubsub = self._reader, self._pubsub
        self._reader = self._pubsub = None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def release(self, still_idle: Callable[[], bool]) -> None:
        """Idle for a while: leave the process table, let go of the channel and of
        idle connections; unless ``still_idle()`` says a call began meanwhile. Under
        the lock that ``subscribe`` takes: a new admission waits until this is done."""
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if not still_idle():
                return
            with contextlib.suppress(RedisError):
                await self.call("unregister")
            await self._unsubscribe()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.connection_pool.disconnect(inuse_connections=False)

    async def reset(self) -> None:
        """Redis failed: close every connection (a restarted server leaves them all
        stale), so that the next call, or the probe, opens fresh ones."""
        await self.unsubscribe()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.connection_pool.disconnect()

    async def refresh_idle(self) -> None:
        """Close the idle connections (one was found dropped: its siblings may be too);
        calls under way keep theirs."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.connection_pool.disconnect(inuse_connections=False)

    async def close(self) -> None:
        """For good (the pool was drained or stopped). A read under way in another thread
        finishes on its connection: only idle ones are closed here, the rest when the
        client goes."""
        await self.unsubscribe()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
        with self._sync_lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            with contextlib.suppress(Exception):
                sync.connection_pool.disconnect(inuse_connections=False)

    # --- from any thread ------------------------------------------------------

    def sync(self) -> redis.Redis:
        """The synchronous client for reads; thread-safe, never for the job loop."""
        if on_job_loop():
            warnings.warn(
                "a blocking Redis read on the PDF pool's job loop stalls every job: "
                "read from another thread",
                BlockingCallWarning,
                stacklevel=3,
            )
        with self._sync_lock:
            if self._sync is None:
                self._sync = redis.Redis.from_url(
                    self.url,
                    decode_responses=True,
                    socket_timeout=self._timeout,
                    socket_connect_timeout=self._timeout,
                    retry=Retry(NoBackoff(), 1),  # reads only: once more on a stale connection
                )
                self._sync_scripts = {"view": self._sync.register_script(SOURCES["view"])}
            return self._sync

    def running(self) -> int:
        return int(self.sync().scard(self.prefix + "running"))

    def queued(self) -> int:
        return int(self.sync().llen(self.prefix + "queue"))

    def waiting(self, key: str) -> int:
        """Callers waiting on ``key``'s job in every process, less its starter."""
        fields: dict[str, str] = self.sync().hgetall(self.prefix + "job:" + key)  # type: ignore[assignment]
        total = sum(int(value) for name, value in fields.items() if name.startswith("w:"))
        return max(0, total - int(fields.get("sw", 0) or 0))

    def pressure(self, key: str | None, caller: str | None = None) -> tuple[int, int, bool, bool]:
        """Running and queued jobs in every process, whether ``key``'s job is in flight,
        and whether ``caller`` holds a job for another key: one round trip."""
        pipe = self.sync().pipeline(transaction=False)
        pipe.scard(self.prefix + "running")
        pipe.llen(self.prefix + "queue")
        pipe.exists(self.prefix + "job:" + (key or ""))
        pipe.hget(self.prefix + "callers", caller or "")
        running, queued, exists, held = pipe.execute()
        busy = caller is not None and held is not None and held != key
        return int(running), int(queued), key is not None and bool(exists), busy

    def view(self) -> Any:
        """Everything in flight, with the process leases (``view.lua``)."""
        client = self.sync()
        return self._sync_scripts["view"](keys=[self.procs_key], client=client)

    def keys(self) -> list[str]:
        """Every key of the namespace (SCAN; for tests and diagnostics)."""
        pattern = _glob_escape(self.prefix) + "*"
        return sorted(self.sync().scan_iter(match=pattern, count=1000))


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
