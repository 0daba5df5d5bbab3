"""The link to Redis: the Lua scripts and their replies, and the connections (asyncio on the job
loop, synchronous for reads from any thread). Scripts are never retried."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import warnings
from collections.abc import Callable
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
from redis.exceptions import RedisError
from redis.retry import Retry

from ...exceptions import BlockingCallWarning
from ..jobs import on_job_loop
from ..ledger import Ledger
from ..protocol import ErrorObserver
from .codec import Decode, Encode
from .urls import presentable

logger = logging.getLogger("django_pdfpool.redis")

# --- the scripts (lua/*.lua, read once at import) and their replies (documented there) ----

# without the prelude: reads, and writes of a key of their own; the others change state after it
READING = ("collect", "put", "view", "pressure", "probe")
PIECE = 1 << 20  # bytes of an outcome a call carries at most: each call fits in the timeout
_LUA = {
    path.name[:-4]: path.read_text("utf-8")
    for path in files(__package__).joinpath("lua").iterdir()
    if path.name.endswith(".lua")
}
_PRELUDE = _LUA.pop("prelude")
SOURCES = {name: ("" if name in READING else _PRELUDE) + text for name, text in _LUA.items()}


class Event(NamedTuple):
    """What a script tells a process about one job (kinds: docs/cluster.md)."""

    kind: str
    key: str
    job_id: str


OnEvent = Callable[[Event], None]
OnError = Callable[[BaseException], object]


def events_of(flat: list[str]) -> list[Event]:
    """``[kind, key, id, ...]``: every mutating script's last reply item (admit's, its 7th)."""
    return [Event(*flat[i : i + 3]) for i in range(0, len(flat), 3)]


class Load(NamedTuple):
    """What a Retry-After is estimated from, as the scripts read it (``load_now``)."""

    running_for: tuple[float, ...]  # seconds each running job has run
    head_waited: float | None  # seconds the queue's head has waited (None: no queue)
    state: tuple[int, ...]  # the head's queue time and the starts: new once a job moves
    sizes: tuple[int | None, ...] = ()  # each running job's input, in bytes (None: not known)
    size: int | None = None  # the input of the caller's job asked about (None: not known)
    took: tuple[float, ...] = ()  # the cluster's latest run times, seconds (newest first)

    @classmethod
    def of(cls, flat: list[Any]) -> Load:
        now, head, size, n, *rest = (int(n) for n in flat)
        took, runs = tuple(ms / 1000 for ms in rest[:n]), rest[n:]
        runs_by_start = sorted(zip(runs[::2], runs[1::2], strict=True))
        starts = tuple(ms for ms, _ in runs_by_start)
        waited = None if head < 0 else (now - head) / 1000
        sizes = tuple(None if n < 0 else n for _, n in runs_by_start)
        running_for = tuple((now - ms) / 1000 for ms in starts)
        return cls(running_for, waited, (head, *starts), sizes, None if size < 0 else size, took)

    def until_free(
        self, books: Ledger, queued: int, caller: str | None = None, *, start: bool = False
    ) -> float:
        """``books.expected_start`` under this load, ``queued`` jobs in the queue."""
        books.seed(self.took)
        return books.expected_start(
            queued, self.running_for, self.head_waited, start=start, caller=caller,
            sizes=self.sizes,
        )  # fmt: skip

    def until_end(
        self, books: Ledger, state: str, age: float, ahead: int, caller: str | None
    ) -> float:
        """``books.expected_end`` of the caller's job: ``state`` for ``age`` s, ``ahead``
        jobs before it in the queue."""
        running_for = age if state == "running" else None
        books.seed(self.took)
        return books.expected_end(
            running_for, ahead, self.running_for, age, caller=caller, size=self.size,
            sizes=self.sizes,
        )  # fmt: skip


class AdmitReply(NamedTuple):
    """``admit.lua``'s answer; ``age`` in seconds."""

    status: str
    job_id: str
    state: str
    owner: str
    age: float
    queued: int  # jobs in the queue when the script ran (caller: the jobs ahead of its job)
    events: list[Event]
    differs: dict[str, str]  # mismatch only: {term: theirs}
    load: Load | None  # busy and caller only

    @classmethod
    def of(cls, reply: Any) -> AdmitReply:
        status, job_id, state, owner, age_ms, queued, events, *rest = reply
        differs = dict(zip(rest[0][::2], rest[0][1::2], strict=False)) if rest else {}
        load = Load.of(rest[1]) if len(rest) > 1 else None
        age = int(age_ms) / 1000
        return cls(status, job_id, state, owner, age, int(queued), events_of(events), differs, load)


class PressureReply(NamedTuple):
    """``pressure.lua``'s answer; ``age`` in seconds."""

    running: int
    queued: int
    in_flight: bool
    caller_busy: bool
    state: str
    age: float
    ahead: int
    waiting: int  # callers sharing KEY's job in every process, less its starter
    load: Load
    sizes: tuple[int, ...] | None = None  # of the jobs in flight (None: one not known)

    @classmethod
    def of(cls, reply: Any) -> PressureReply:
        running, queued, in_flight, busy, state, age_ms, ahead, waiting, load, sizes = reply
        listed = str(sizes)
        known = tuple(map(int, listed.split(","))) if listed and listed != "?" else None
        return cls(
            int(running), int(queued), bool(in_flight), bool(busy), str(state),
            int(age_ms) / 1000, int(ahead), int(waiting), Load.of(load), known,
        )  # fmt: skip


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
    def terms(self) -> dict[str, str]:
        """What admit.lua holds alike in every live process of a namespace, as it keeps it."""
        slots, queue, lease = str(self.slots), str(self.queue_size), str(round(self.lease * 1000))
        terms = {"slots": slots, "queue": queue, "wait": self.wait_ms, "lease": lease}
        return terms | {"fingerprint": self.fingerprint, "deployment": self.deployment}

    @property
    def probe_every(self) -> float:
        """Seconds between two probes while Redis fails."""
        return min(1.0, self.lease / 2)


MAX_CONNECTIONS = 16  # per pool, on the job loop; callers beyond wait for one


def connect(
    url: str, sentinels: Sentinels, timeout: float, *, on_loop: bool = False, **options: Any
) -> Any:
    """A client (text replies, ``options``) whose connects and calls time out after
    ``timeout``: to ``url``, or through the ``sentinels`` to the primary the URL's host names;
    asyncio's ``on_loop``. Nothing is sent: ValueError for what its connections would refuse."""
    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    try:
        parsed = dict(parse_url(url))  # type: ignore[no-untyped-call]
        if set(timeouts) & set(parsed):  # from_url would take the URL's over TIMEOUT's
            raise ValueError("its socket timeouts are REDIS['TIMEOUT']'s to set, not the URL's")
        if int(parsed.get("db", 0)) < 0:
            raise ValueError("its database number is negative")
        if not sentinels and not on_loop:
            client: Any = redis.Redis.from_url(url, decode_responses=True, **timeouts, **options)
        elif not sentinels:  # callers beyond MAX_CONNECTIONS wait for one, up to the timeout
            client = aredis.Redis(connection_pool=aredis.BlockingConnectionPool.from_url(
                url, max_connections=MAX_CONNECTIONS, timeout=timeout, decode_responses=True,
                **timeouts, **options,
            ))  # fmt: skip
        else:
            if "host" not in parsed:
                raise ValueError("with SENTINELS its host names the primary, and it has none")
            service = str(parsed["host"])
            for name in ("host", "port", "path", "connection_class"):
                parsed.pop(name, None)
            if url.lower().startswith("rediss://"):
                parsed["ssl"] = True
            sentinel: Callable[..., Any] = (
                aredis_sentinel.Sentinel if on_loop else redis.sentinel.Sentinel
            )
            client = sentinel(
                list(sentinels), sentinel_kwargs=timeouts, **parsed, **timeouts,
                decode_responses=True, **options,
            ).master_for(service)  # fmt: skip
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)  # unconnected: refuses a wrong option
    except (TypeError, ValueError) as error:
        raise ValueError(f"{presentable(url)} cannot be used: {error}") from None
    return client


class Link:
    """One pool's connections (one process id, one namespace) to Redis, or to the primary."""

    def __init__(
        self, settings: RedisPoolSettings, process: str, on_event: OnEvent, on_error: OnError
    ) -> None:
        s = self.settings = settings  # set once, as every field down to _head: any thread
        self._on_event, self._on_error = on_event, on_error  # what the channel's reader calls
        self.prefix = "{" + s.namespace + "}:"
        self.process = process
        self.procs_key = self.prefix + "procs"
        self.channel = self.prefix + "ch:" + process
        self.where = presentable(s.url)  # the URL without its secrets, for logs and pages
        self._head = [process, str(round(s.lease * 1000)), str(s.slots)]  # each script's ARGV
        self._client: aredis.Redis | None = None  # job loop, as the next four
        self._scripts: dict[str, Any] = {}
        self._pubsub: Any = None  # under _subscribing
        self._reader: asyncio.Task[None] | None = None  # under _subscribing
        self._subscribing = asyncio.Lock()  # bound to the job loop on first use
        self._sync_lock = threading.Lock()  # guards the next two (any thread)
        self._sync: redis.Redis | None = None
        self._sync_scripts: dict[str, Any] = {}  # written with _sync; read after sync()

    @property
    def used(self) -> bool:
        """Whether the asyncio client was ever made (a pool never used has nothing to undo)."""
        return self._client is not None

    # --- on the job loop ------------------------------------------------------

    def client(self) -> aredis.Redis:
        """The asyncio client; made on first use, on the job loop."""
        if self._client is None:
            s, retry = self.settings, AsyncRetry(NoBackoff(), 0)
            self._client = connect(s.url, s.sentinels, s.timeout, on_loop=True, retry=retry)
            self._scripts = {name: self._client.register_script(SOURCES[name]) for name in SOURCES}
        return self._client

    async def _run(self, name: str, key: str, *args: Any) -> Any:
        self.client()
        return await self._scripts[name](keys=[key], args=list(args))

    async def call(self, name: str, *args: Any) -> Any:
        """Run a mutating script as this process; its reply as Redis gives it."""
        return await self._run(name, self.procs_key, *self._head, *args)

    async def load(self) -> PressureReply:
        """``pressure()`` for the job loop: the counts and the load, no key or caller."""
        return PressureReply.of(await self._run("pressure", self.procs_key, "", ""))

    async def put(self, job_id: str, outcome: str) -> int:
        """Put a finished job's outcome (JSON) in Redis in pieces; their number."""
        data, keep = outcome.encode(), str(round(2000 * self.settings.lease))
        start = pieces = 0
        while start < len(data):  # cut between two characters: each piece reads back as text
            end = min(len(data), start + PIECE)
            while end < len(data) and data[end] & 0xC0 == 0x80:
                end -= 1
            pieces += 1
            await self._run("put", self.prefix + "res:" + job_id, pieces, data[start:end], keep)
            start = end
        return pieces

    async def collect(self, job_id: str, *, read: bool = True) -> str | None:
        """Take this process's copy of a finished job's outcome (JSON), piece by piece, or
        None; ``read`` False: let it go unread."""
        pieces: list[str] = []
        keep, count = str(round(2000 * self.settings.lease)), 1
        while len(pieces) < count:
            index = len(pieces) + 1 if read else 0
            key = self.prefix + "res:" + job_id
            reply = await self._run("collect", key, self.process, index, keep)
            if not reply:
                return None
            count = int(reply[0])
            pieces.append(reply[1])
        return "".join(pieces)

    async def probe(self) -> None:
        """PING, then a write in the namespace (``probe.lua``): Redis takes writes again."""
        await self.client().ping()
        await self._run("probe", self.procs_key)

    async def subscribe(self) -> None:
        """Listen on this process's channel, unless listening; returns once Redis confirmed."""
        async with self._subscribing:
            if self._reader is not None and not self._reader.done():
                return
            await self._unsubscribe()
            self._pubsub = pubsub = self.client().pubsub()
            try:
                await pubsub.subscribe(self.channel)  # confirmed by the first message
                message = await pubsub.get_message(timeout=self.settings.timeout)
                if message is None or message["type"] != "subscribe":
                    raise redis.exceptions.TimeoutError("no confirmation of SUBSCRIBE")
            except BaseException:
                await self._unsubscribe()
                raise
            self._reader = asyncio.get_running_loop().create_task(self._read(pubsub))

    async def _read(self, pubsub: Any) -> None:
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
                self._on_event(Event(str(kind), str(key), str(job_id)))
        except (RedisError, OSError) as error:
            self._on_error(error)

    async def unsubscribe(self) -> None:
        """Stop listening (idle, failing or closing); ``subscribe`` starts again."""
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
        """Idle a while: leave the process table, the channel and idle connections, unless
        ``still_idle()`` says a call began; under ``subscribe``'s lock (a new call waits)."""
        async with self._subscribing:
            if not still_idle():
                return
            with contextlib.suppress(RedisError):
                await self.call("unregister")
            await self._unsubscribe()
        await self.refresh_idle()

    async def reset(self) -> None:
        """Redis failed: close every connection (a restarted server leaves them all stale)."""
        await self.unsubscribe()
        await self.refresh_idle(inuse=True)

    async def refresh_idle(self, *, inuse: bool = False) -> None:
        """Close the idle connections (one was dropped: its siblings may be too)."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.connection_pool.disconnect(inuse_connections=inuse)

    async def close(self) -> None:
        """For good (drained or stopped); a read under way in another thread keeps its own."""
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
            if self._sync is None:  # reads: again once if the connection was stale, but
                # not after a timeout (a read waits TIMEOUT at most, as any call)
                stale = (redis.exceptions.ConnectionError,)
                s, retry = self.settings, Retry(NoBackoff(), 1, supported_errors=stale)
                self._sync = connect(s.url, s.sentinels, s.timeout, retry=retry)
                self._sync_scripts = {
                    name: self._sync.register_script(SOURCES[name]) for name in ("view", "pressure")
                }
            return self._sync

    def pressure(self, key: str | None = None, caller: str | None = None) -> PressureReply:
        """The counts, and ``key``'s and ``caller``'s jobs, in one round trip (``pressure.lua``)."""
        self.sync()
        args = ["" if name is None else "=" + name for name in (key, caller)]
        return PressureReply.of(self._sync_scripts["pressure"](keys=[self.procs_key], args=args))

    def view(self) -> Any:
        """Everything in flight, with the process leases (``view.lua``)."""
        self.sync()
        return self._sync_scripts["view"](keys=[self.procs_key])
