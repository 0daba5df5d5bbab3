"""The link to Redis: the Lua scripts, each one's reply as a named tuple, and the connections
(asyncio on the job loop, synchronous for reads from any thread). Scripts are never retried."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, NamedTuple

import redis
import redis.asyncio as aredis
import redis.asyncio.sentinel as aredis_sentinel
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

from ...exceptions import BlockingCallWarning
from ..jobs import on_job_loop
from ..protocol import ErrorObserver
from .codec import Decode, Encode
from .urls import presentable
from .view import whole

logger = logging.getLogger("django_pdfpool.redis")

# --- the scripts (lua/*.lua, read once at import) and their replies (documented there) ----

MUTATING = ("admit", "leave", "finish", "expire", "drop", "beat", "unregister", "refused")
READING = ("collect", "view", "pressure", "probe")


def _read(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


_PRELUDE = _read("prelude")
SOURCES: dict[str, str] = {
    **{name: _PRELUDE + _read(name) for name in MUTATING},  # each after the shared prelude
    **{name: _read(name) for name in READING},
}


class Event(NamedTuple):
    """What a script tells a process about one job (kinds: docs/cluster.md)."""

    kind: str
    key: str
    job_id: str


def events_of(flat: list[str]) -> list[Event]:
    """The events a script returns for the calling process: ``[kind, key, id, ...]``."""
    return [Event(*flat[i : i + 3]) for i in range(0, len(flat), 3)]


class AdmitReply(NamedTuple):
    """``admit.lua``'s answer; ``age`` in seconds."""

    status: str
    job_id: str
    state: str
    owner: str
    age: float
    queued: int  # jobs in the queue when the script ran
    events: list[Event]
    differs: dict[str, str] = {}  # noqa: RUF012 - never mutated; mismatch only

    @classmethod
    def of(cls, reply: Any) -> AdmitReply:
        status, job_id, state, owner, age_ms, queued, events, *rest = reply
        flat = rest[0] if rest else []
        differs = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        age = int(age_ms) / 1000
        return cls(status, job_id, state, owner, age, int(queued), events_of(events), differs)


class StatusReply(NamedTuple):
    """``leave.lua``'s and ``finish.lua``'s answer."""

    status: str
    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> StatusReply:
        return cls(reply[0], events_of(reply[1]))


class ExpireReply(NamedTuple):
    """``expire.lua``'s answer; ``left`` in seconds."""

    left: float
    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> ExpireReply:
        return cls(int(reply[0]) / 1000, events_of(reply[1]))


class EventsReply(NamedTuple):
    """``drop.lua``'s and ``unregister.lua``'s answer: only events."""

    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> EventsReply:
        return cls(events_of(reply[0]))


class PressureReply(NamedTuple):
    """``pressure.lua``'s answer; ``age`` in seconds."""

    running: int
    queued: int
    in_flight: bool
    caller_busy: bool
    state: str
    age: float
    ahead: int

    @classmethod
    def of(cls, reply: Any) -> PressureReply:
        running, queued, in_flight, busy, state, age_ms, ahead = reply
        return cls(
            int(running), int(queued), bool(in_flight), bool(busy), str(state),
            int(age_ms) / 1000, int(ahead),
        )  # fmt: skip


class JobReport(NamedTuple):
    """One job as ``beat.lua`` found it (``data``: a ``done`` job's outcome)."""

    state: str
    data: str


class BeatReply(NamedTuple):
    """``beat.lua``'s answer; ``next_lease_end`` in seconds, None for no other process."""

    next_lease_end: float | None
    reports: list[JobReport]
    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> BeatReply:
        next_ms, flat, events = reply
        reports = [JobReport(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        ends = None if int(next_ms) < 0 else int(next_ms) / 1000
        return cls(ends, reports, events_of(events))


# --- the settings and the connections ------------------------------------------------------

Sentinels = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class RedisPoolSettings:
    """What a ``RedisPool`` was built with, as its side and link read it (frozen: any thread)."""

    url: str
    namespace: str
    sentinels: Sentinels  # (host, port) each; then the URL's host names the primary
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
        """Seconds between two probes while Redis fails."""
        return min(1.0, self.lease / 2)


MAX_CONNECTIONS = 16  # per pool, on the job loop; callers beyond wait for one


class Link:
    """The connections of one pool (one process id, one namespace) to one Redis: the one
    at ``url`` or, with ``sentinels``, the primary the Sentinels name for the URL's host
    (the service name; the URL gives the rest: credentials, database, TLS)."""

    def __init__(self, settings: RedisPoolSettings, process: str) -> None:
        s = settings  # set once, as every field down to _head: any thread reads them
        self.url, self.namespace, self.sentinels = s.url, s.namespace, s.sentinels
        self.prefix = "{" + s.namespace + "}:"
        self.process = process
        self.procs_key = self.prefix + "procs"
        self.channel = self.prefix + "ch:" + process
        self._timeout = s.timeout
        self._head = [process, str(round(s.lease * 1000)), str(s.slots)]  # each script's ARGV
        self._client: aredis.Redis | None = None  # job loop, as the next four
        self._scripts: dict[str, Any] = {}
        self._pubsub: Any = None  # under _subscribing
        self._reader: asyncio.Task[None] | None = None  # under _subscribing
        self._subscribing: asyncio.Lock | None = None  # made there by _gate
        self._sync_lock = threading.Lock()  # guards the next two (any thread)
        self._sync: redis.Redis | None = None
        self._sync_scripts: dict[str, Any] = {}  # written with _sync; read after sync()

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
            options = self._options(AsyncRetry(NoBackoff(), 0))
            if self.sentinels:
                self._client = _sentinel(aredis_sentinel.Sentinel, self, options).master_for(
                    self._service()
                )
            else:
                pool = aredis.BlockingConnectionPool.from_url(
                    self.url, max_connections=MAX_CONNECTIONS, timeout=self._timeout, **options
                )
                self._client = aredis.Redis(connection_pool=pool)
            self._scripts = {
                name: self._client.register_script(SOURCES[name])
                for name in (*MUTATING, "collect", "probe")
            }
        return self._client

    def _options(self, retry: Any) -> dict[str, Any]:
        """A client's options: the call timeout, text replies, and ``retry``."""
        timeout = self._timeout
        return {
            "decode_responses": True,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": retry,
        }

    def _service(self) -> str:
        """The Sentinel service name: the URL's host."""
        return str(parse_url(self.url)["host"])  # type: ignore[no-untyped-call]

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

    async def probe(self) -> None:
        """PING, then a write in the namespace (``probe.lua``): Redis takes writes again."""
        await self.client().ping()
        await self._scripts["probe"](keys=[self.procs_key])

    async def subscribe(
        self, on_event: Callable[[Event], None], on_error: Callable[[BaseException], object]
    ) -> None:
        """Listen on this process's channel, unless already listening. Returns once
        Redis confirmed the subscription: no event published after can be missed."""
        async with self._gate():
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
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed in redis 8.2
                raise
            self._pubsub = pubsub
            self._reader = asyncio.get_running_loop().create_task(
                self._read(pubsub, on_event, on_error)
            )

    def _gate(self) -> asyncio.Lock:
        """The lock of subscribing and releasing, made on first use on the job loop."""
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        return self._subscribing

    async def _read(
        self,
        pubsub: Any,
        on_event: Callable[[Event], None],
        on_error: Callable[[BaseException], object],
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
        async with self._gate():
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
        async with self._gate():
            if not still_idle():
                return
            with contextlib.suppress(RedisError):
                await self.call("unregister")
            await self._unsubscribe()
        await self.refresh_idle()

    async def reset(self) -> None:
        """Redis failed: close every connection (a restarted server leaves them all
        stale), so that the next call, or the probe, opens fresh ones."""
        await self.unsubscribe()
        await self._disconnect(idle_only=False)

    async def refresh_idle(self) -> None:
        """Close the idle connections (one was dropped: its siblings may be too)."""
        await self._disconnect(idle_only=True)

    async def _disconnect(self, *, idle_only: bool) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.connection_pool.disconnect(inuse_connections=not idle_only)

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
                options = self._options(Retry(NoBackoff(), 1))  # reads: again if stale
                if self.sentinels:
                    sentinel = _sentinel(redis.sentinel.Sentinel, self, options)
                    self._sync = sentinel.master_for(self._service())
                else:
                    self._sync = redis.Redis.from_url(self.url, **options)
                self._sync_scripts = {
                    name: self._sync.register_script(SOURCES[name]) for name in ("view", "pressure")
                }
            return self._sync

    def running(self) -> int:
        return self._count("scard", "running")

    def queued(self) -> int:
        return self._count("llen", "queue")

    def _count(self, command: str, name: str) -> int:
        """SCARD or LLEN of a state key (see ``_typed``)."""
        with _typed():
            return int(getattr(self.sync(), command)(self.prefix + name))
        return 0

    def waiting(self, key: str) -> int:
        """Callers waiting on ``key``'s job in every process, less its starter (counts
        that are not whole numbers skipped)."""
        fields: dict[str, str] = {}
        with _typed():
            fields = self.sync().hgetall(self.prefix + "job:" + key)  # type: ignore[assignment]
        counts = [whole(value) for name, value in fields.items() if name.startswith("w:")]
        total = sum(n for n in counts if n is not None and n > 0)
        return max(0, total - max(0, whole(fields.get("sw")) or 0))

    def pressure(self, key: str | None, caller: str | None) -> PressureReply:
        """Running and queued jobs in every process, whether ``key``'s job is in flight,
        and whether ``caller`` is busy with another: one round trip (``pressure.lua``)."""
        client = self.sync()
        args = [key or "", caller or ""]
        raw = self._sync_scripts["pressure"](keys=[self.procs_key], args=args, client=client)
        return PressureReply.of(raw)

    def view(self) -> Any:
        """Everything in flight, with the process leases (``view.lua``)."""
        client = self.sync()
        return self._sync_scripts["view"](keys=[self.procs_key], client=client)

    def keys(self) -> list[str]:
        """Every key of the namespace (SCAN; for tests and diagnostics)."""
        pattern = _glob_escape(self.prefix) + "*"
        return sorted(self.sync().scan_iter(match=pattern, count=1000))


def _sentinel(make: Callable[..., Any], link: Link, options: dict[str, Any]) -> Any:
    """A Sentinel client (redis-py's, sync or asyncio) for ``link``: the Sentinels are
    asked with the same timeouts; the primary is reached with the URL's credentials,
    database and TLS (``rediss://``, its ``ssl_*`` query parameters)."""
    parsed = dict(parse_url(link.url))  # type: ignore[no-untyped-call]
    for name in ("host", "port", "path", "connection_class"):
        parsed.pop(name, None)
    if link.url.lower().startswith("rediss://"):
        parsed["ssl"] = True
    timeouts = {name: options[name] for name in ("socket_timeout", "socket_connect_timeout")}
    return make(list(link.sentinels), sentinel_kwargs=timeouts, **parsed, **options)


@contextlib.contextmanager
def _typed() -> Iterator[None]:
    """A read of a key holding another type (bad data, which the next script deletes) reads
    as nothing: a read never fails on what Redis holds."""
    try:
        yield
    except ResponseError as error:
        if not str(error).startswith("WRONGTYPE"):
            raise


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
