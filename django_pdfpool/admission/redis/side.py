"""This process's side of a Redis pool: its calls and jobs, in step with the scripts, on the
job loop (docs/cluster.md). Made afresh after a fork."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from redis import exceptions as redis_errors
from redis.exceptions import RedisError

import django_pdfpool.admission.jobs as jobs

from ...exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    PoolBusy,
    PoolMisconfigured,
    RunnerLost,
    Wording,
)
from ..jobs import JobRecord, Waiter
from ..ledger import Counter, Ledger
from ..local import Pool
from ..protocol import DropFn, JobFn
from .codec import decode_outcome, encode_outcome
from .link import AdmitReply, Event, Link, RedisPoolSettings, events_of

logger = logging.getLogger("django_pdfpool.redis")

# the modes of a Redis-coordinated pool: in Redis, in the local fallback, refusing (Redis fails)
REDIS, LOCAL_FALLBACK, REFUSING = "redis", "local-fallback", "refusing"
GO_LOCAL = object()  # an admission's answer: Redis failed, take the fallback path
UNREACHABLE, REFUSED = "unreachable", "refused"  # why Redis fails: ProcessSide.trouble


@dataclass
class Closing:
    """The pool's closing flags: plain bools, set from any thread, read on the job loop."""

    closed: bool = False  # set by close/drain/stop: no new call here
    stopping: bool = False  # set by stop: running jobs are cancelled


@dataclass(slots=True, eq=False)
class RedisWaiter(Waiter):
    """One call of this process: its arguments, set before the job loop sees it, read there."""

    key: str
    caller: str
    fn: JobFn | None
    on_drop: DropFn | None
    size: int | None = None
    admission: asyncio.Task[None] | None = None  # job loop
    job: RedisJob | None = None  # job loop: the job it waits on, once admitted
    handed_back: bool = False  # job loop: Redis failed, the call goes to the fallback


@dataclass(slots=True, eq=False)
class RedisJob(JobRecord):
    """A job this process runs or queues (``owned``) or waits on. Written on the job loop;
    other threads read ``owned``, ``state`` and the waiters (``ProcessSide.jobs``)."""

    id: str = ""
    owned: bool = False  # this process runs or queues it (else it waits on another's)
    collecting: bool = False  # its outcome is being read from Redis
    finishing: bool = False  # its task ended: never to be counted again (see beat.lua)
    gone_seen: bool = False  # the last beat did not find it in Redis
    inflight: int = 0  # scripts about it on their way: the beat does not judge it then
    # Redis failed while it ran: the fallback pool counts it until this ends it
    local_hold: Callable[[Any, BaseException | None], None] | None = None


class ProcessSide:
    """This process's calls and jobs of one ``RedisPool``; each field the job loop's unless
    its comment says otherwise."""

    def __init__(
        self, settings: RedisPoolSettings, books: Ledger, closing: Closing, fallback: Pool | None
    ) -> None:
        self._settings = settings  # frozen: any thread
        self._closing = closing  # see Closing
        self._books = books  # thread-safe on its own
        self._fallback = fallback  # set once; the pool new calls go to while Redis fails
        self.process = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"  # set once
        self.link = Link(settings, self.process, self._on_event, self.failed)  # reads: any thread
        self._tasks: set[asyncio.Task[Any]] = set()  # background tasks, referenced till done
        self.retired = False  # for good: unregistered from Redis, connections closed
        self._idle_waiters: list[Waiter] = []  # drain/stop waiting for nothing in flight
        self._release_timer: asyncio.TimerHandle | None = None  # idle: let go of Redis
        self._told_mismatch = False  # the deployment error is logged once per process
        self._lock = threading.Lock()  # for other threads' reads of the next two
        self._jobs: dict[str, RedisJob] = {}  # written under _lock: in flight here, by id
        self.admissions: dict[asyncio.Task[None], str] = {}  # under _lock: under way, its key
        self._seq = 0  # numbers the job ids this process makes (see beat.lua)
        self._pending: set[str] = set()  # ids of jobs being admitted with an fn
        self._dropping: set[str] = set()  # ids of our jobs being dropped
        # events ahead of their admission's reply: id -> (first seen, events)
        self._early: dict[str, tuple[float, list[Event]]] = {}
        # outcomes of jobs that ended here, for a join (of their key) whose reply comes after
        # the end: id -> (ended, key, result, error)
        self._finished: dict[str, tuple[float, str, Any, BaseException | None]] = {}
        self.mode = REDIS  # any thread reads it (one str): REDIS, LOCAL_FALLBACK, REFUSING
        self.trouble: str | None = None  # any thread reads: UNREACHABLE or REFUSED, not REDIS
        self.last_error = ""  # any thread reads: the last failure, for the status page
        self.failures = {UNREACHABLE: 0, REFUSED: 0}  # any thread reads: fallbacks, by cause
        self._last_ok = time.monotonic()  # when Redis last answered a script of this process
        self._probe: asyncio.Task[None] | None = None
        self._confirming: asyncio.Task[bool] | None = None  # is a failure only a dropped link?
        # The beat. A finish waits for the beat in flight, whose arguments may name the job
        # as running: sent after it, the beat would count the finished job again (beat.lua).
        self._beat_task: asyncio.Task[None] | None = None
        self._no_beat = asyncio.Event()  # set while no beat is on its way
        self._no_beat.set()
        self._beats = 0  # beats on their way

    # --- entries from the callers' side (any thread, through call_soon_threadsafe) --------

    def begin(self, waiter: RedisWaiter) -> None:
        """Start admitting a call; its waiter learns the outcome."""
        if self._closing.closed:  # since the caller's check: refused, as Pool's rule 0 (else
            # admitted after stop() cancelled this process's jobs, it would run and be waited for)
            self._books.count(Counter.REFUSED_CLOSED)
            jobs.call_dropped(waiter.on_drop)
            jobs.deliver([waiter], None, jobs.closing())
            return
        self._keep_redis()
        task = waiter.admission = self.spawn(self._admit(waiter))
        with self._lock:
            self.admissions[task] = waiter.key
        task.add_done_callback(self._admitted)

    def add_idle_waiter(self, waiter: Waiter) -> None:
        self._idle_waiters.append(waiter)
        self._settle()

    # --- readings from any thread ----------------------------------------------------------

    def busy(self) -> bool:
        """Anything in flight here: a job, or an admission under way."""
        with self._lock:
            return bool(self._jobs or self.admissions)

    def jobs(self) -> list[RedisJob]:
        with self._lock:
            return list(self._jobs.values())

    def owned(self, state: str) -> int:
        """This process's jobs in ``state``, less those the fallback pool holds (it counts them)."""
        return sum(job.owned and job.state == state and not job.local_hold for job in self.jobs())

    def sharers(self, key: str) -> int:
        """This process's callers sharing ``key``'s job, less its starter."""
        return sum(job.sharers() for job in self.jobs() if job.key == key)

    # --- rules 1-3: admission (admit.lua) ---------------------------------------------------

    async def _admit(self, waiter: RedisWaiter) -> None:
        self._seq += 1
        job_id = f"{self._seq}.{secrets.token_hex(4)}"  # numbered: see beat.lua
        if waiter.fn is not None:
            self._pending.add(job_id)
        try:
            try:
                await self._no_beat.wait()  # one on its way may count again jobs Redis lost
                if self.mode != REDIS:
                    raise RedisError("Redis failed a moment ago")
                await self.link.subscribe()
                sent = time.monotonic()
                s, has_fn = self._settings, "1" if waiter.fn is not None else "0"
                reply = AdmitReply.of(await self.link.call(
                    "admit", str(s.queue_size), s.wait_ms, waiter.key, waiter.caller, job_id,
                    has_fn, s.fingerprint, s.deployment, "" if waiter.size is None else waiter.size,
                ))  # fmt: skip
                self._last_ok = time.monotonic()
            except RedisError as error:
                self._pending.discard(job_id)  # if the script ran, the job is no one's to run:
                # the beat that confirms Redis answers ends it
                if await self.failed(error):  # only a connection dropped: Redis is up,
                    jobs.call_dropped(waiter.on_drop)  # and whether the script ran is unknown
                    self._books.count(Counter.REFUSED_UNAVAILABLE)
                    jobs.deliver([waiter], None, CoordinatorUnavailable(Wording.DROPPED, 1.0))
                    return
                waiter.handed_back = True  # the caller takes it to the fallback, or (gone) leaves
                jobs.deliver([waiter], GO_LOCAL, None)
                return
            except Exception as error:  # a bug: the caller must hear of it, not hang
                logger.exception("admitting a job failed")
                jobs.call_dropped(waiter.on_drop)
                jobs.deliver([waiter], None, error)
                return
            self._register(waiter, reply, sent)
        finally:
            self._pending.discard(job_id)
        for known in (job_id, reply.job_id):
            self._handle(self._early.pop(known, (0.0, []))[1])
        self._handle(reply.events)

    def _admitted(self, task: asyncio.Task[None]) -> None:
        """An admission ended: act on the early events no admission can claim any more."""
        with self._lock:
            self.admissions.pop(task, None)
            old = math.inf if not self.admissions else time.monotonic() - 2 * self._settings.timeout
            keys = set(self.admissions.values())
        stale = {job_id: early for job_id, early in self._early.items() if early[0] < old}
        self._early = {job_id: early for job_id, early in self._early.items() if early[0] >= old}
        kept = self._finished.items()  # each for a join of its key still on its way
        self._finished = {job_id: end for job_id, end in kept if end[0] >= old and end[1] in keys}
        for event in (event for _, events in stale.values() for event in events):
            if event.job_id in self._jobs:
                self._on_event(event)
            else:
                self._unclaimed(event)
        self._settle()

    def _register(self, waiter: RedisWaiter, reply: AdmitReply, sent: float) -> None:
        """Follow the admit script's answer (the rules are applied there), sent at ``sent``."""
        if reply.status not in ("joined", "started", "queued"):
            jobs.call_dropped(waiter.on_drop)
            jobs.deliver([waiter], None, self._refusal(waiter, reply))
            return
        if reply.status == "joined":  # rule 1
            jobs.call_dropped(waiter.on_drop)  # joined: this call's fn is not needed
            self._books.count(Counter.JOINED)
            ended = self._finished.get(reply.job_id)  # it ended here while the reply travelled
            if ended is not None and ended[0] >= sent:  # (before it was sent: Redis counted
                # it again since, and this call waits on it again)
                jobs.deliver([waiter], ended[2], ended[3])
                return
        job = self._jobs.get(reply.job_id)
        if job is None:
            job = RedisJob(waiter.key, id=reply.job_id, state=reply.state)
            with self._lock:
                self._jobs[job.id] = job
            if self._beat_task is None:
                self._beat_task = self.spawn(self._beat_loop())
        job.waiters.add(waiter)
        job.size = job.size if job.size is not None else waiter.size  # one key, one input
        waiter.job = job
        if reply.status == "joined":
            lost = not job.owned and reply.job_id not in self._pending
            if reply.owner == self.process and lost:  # ours, from a call whose reply was lost
                self.spawn(self._drop(job, "lost"))
            return
        job.owned, job.caller, job.fn, job.size = True, waiter.caller, waiter.fn, waiter.size
        job.on_drop, job.starter = waiter.on_drop, waiter  # rule 3: a slot, or a queue place
        job.state = "queued"  # until _start runs it here (a join answered first said running)
        if reply.status == "started":
            self._start(job)
        elif self._settings.wait is not None:  # Redis's clock decides when it has passed
            self._arm(job, self._settings.wait)

    def _refusal(self, waiter: RedisWaiter, reply: AdmitReply) -> BaseException:
        books, caller, load, queued = self._books, waiter.caller, reply.load, reply.queued
        if load is not None:  # rule 2, or rule 3 (a full queue)
            books.observe(load.state)
            if reply.status == "caller":  # queued: the jobs ahead of its job
                retry = load.until_end(books, reply.state, reply.age, queued, caller)
                refusal: PoolBusy | CallerBusy = jobs.caller_busy(retry)
            else:
                refusal = jobs.queue_full(load.until_free(books, queued, caller))
            books.refused(Counter.refused(refusal), caller, refusal.retry_after)
            return refusal
        if reply.status not in ("rebuilding", "mismatch"):
            return jobs.nothing_to_join(waiter.key)
        if reply.status == "rebuilding":  # bad data took state: the beats count it again
            books.count(Counter.REFUSED_BUSY)
            return PoolBusy(Wording.REBUILDING, self._settings.lease)
        books.count(Counter.REFUSED_MISCONFIGURED)
        error = self.misconfigured(reply.differs)
        if not self._told_mismatch:
            self._told_mismatch = True
            logger.error("PDF pool refuses every job: %s", error)
        return error

    def refused_for(self, live_terms: list[str]) -> str:
        """Why admit.lua refuses this process (view.lua's terms of the live processes, as
        admit.lua compares them), or "" while its terms are every live process's."""
        mine = self._settings.terms
        for process, text in zip(live_terms[::2], live_terms[1::2], strict=False):
            try:
                theirs = json.loads(text)
            except ValueError:
                continue  # not terms: the next admission cleans it
            if process == self.process or not isinstance(theirs, dict):
                continue
            differs = {
                name: value if isinstance(value, str) else ""
                for name in mine
                if (value := theirs.get(name)) != mine[name]
            }
            if differs:
                return str(self.misconfigured(differs))
        return ""

    def misconfigured(self, differs: dict[str, str]) -> PoolMisconfigured:
        """A live process of the namespace has other terms (``differs``: theirs): a
        deployment error."""
        s, mine = self._settings, self._settings.terms
        named = [
            f"{name} {_shown(name, mine[name])} here, {_shown(name, differs[name])} there"
            for name in ("slots", "queue", "wait", "lease")
            if name in differs
        ]
        if "fingerprint" in differs:
            named.append("the settings that change results differ (fingerprint)")
        if "deployment" in differs:
            message = (
                f"Another deployment uses the Redis namespace {s.namespace!r}: its processes "
                "have another SECRET_KEY (or PDFPOOL['REDIS']['DEPLOYMENT']) than this one, so "
                "their pools are kept apart, not merged. Give each deployment a NAMESPACE of "
                "its own (or, for one deployment, the same SECRET_KEY everywhere)."
            )
        else:
            message = (
                f"The PDF pool's processes sharing the Redis namespace {s.namespace!r} have "
                f"other settings than this one: {'; '.join(named)}. Give them all the same "
                "settings, or each deployment a namespace of its own."
            )
        return PoolMisconfigured(message, s.lease)

    # --- rule 4: leaving (leave.lua) --------------------------------------------------------

    async def leave(self, waiter: RedisWaiter, done: concurrent.futures.Future[None]) -> None:
        """Take a caller that gave up off its job, here and in Redis; ``done`` once done."""
        try:
            if waiter.admission is not None and not waiter.admission.done():
                await asyncio.wait([waiter.admission])
            job = waiter.job
            if job is None and waiter.handed_back:  # it left before the fallback took it
                jobs.call_dropped(waiter.on_drop)
                return
            if job is None or waiter not in job.waiters:
                return  # refused, or answered as it left
            job.waiters.discard(waiter)
            starter = waiter is job.starter
            job.starter = None if starter else job.starter
            with _about(job):
                await self._no_beat.wait()  # one on its way counts the waiter: sent after it
                left = await self._script("leave", job.key, job.id, "1", "1" if starter else "0")
            if not job.owned and not job.waiters and self._holds(job):
                self._remove(job)  # nobody here waits on it any more
            elif left is None and job.state == "queued" and not job.waiters and self._holds(job):
                await self._drop(job, "dropped")  # the leave may not have run: rule 3 here
        finally:
            done.set_result(None)
            self._settle()

    # --- a job's life: a slot, then finish.lua (rule 5) ---------------------------------------

    def _start(self, job: RedisJob) -> None:
        """Run an owned job that has its slot, as a task on this loop."""
        job.disarm()
        job.state = "running"
        job.started_mono = time.monotonic()
        self._books.started(job.started_mono - job.queued_mono)
        job.task = asyncio.get_running_loop().create_task(jobs.run_fn(job))
        job.task.add_done_callback(lambda task: self.spawn(self._finish(job, task)))

    def _slot_given(self, job: RedisJob) -> None:
        """Redis gave a queued job of ours a slot: run it, unless this process is stopping
        (``stop_jobs`` drops it, freeing the slot)."""
        if job.owned and job.state == "queued" and not self._closing.stopping:
            self._start(job)

    async def _finish(self, job: RedisJob, task: asyncio.Task[Any]) -> None:
        """Free the slot and the caller in Redis (the outcome to sharers elsewhere), then answer."""
        job.finishing = True
        result, error, took = jobs.ended(job, task, self._books)
        outcome = Counter.ended(job.cancelled(task), error)  # for finish.lua's tally
        took_ms = str(max(0, round(took * 1000)))
        try:
            with _about(job):
                await self._no_beat.wait()
                head = (job.key, job.id)
                reply = await self._script("finish", *head, "", outcome, took_ms)
                if reply is not None and reply[0] == "need":  # sharers elsewhere: send it
                    s = self._settings
                    data = encode_outcome(result, error, encode=s.encode, limit=s.max_result_bytes)
                    try:
                        pieces = str(await self.link.put(job.id, data))
                    except RedisError as failure:  # as a finish lost: the beat ends the job
                        self.failed(failure)
                    else:
                        await self._no_beat.wait()
                        await self._script("finish", *head, pieces, outcome, took_ms)
        except Exception:  # a bug: the callers here are answered all the same, and the
            # beat frees the slot in Redis of a job this process no longer knows
            logger.exception("finishing job %s in Redis failed", job.key)
        self._end(job, result=result, error=error)
        if error is not None and not job.cancelled(task):
            jobs.report_failure(self._settings.on_error, job.key, error)

    # --- the end of a job here: its outcome, or an event's kind without one (drop.lua) -------

    def _end(
        self, job: RedisJob, kind: str = "", result: Any = None, error: BaseException | None = None
    ) -> None:
        """Hand the outcome to this process's sharers, or end the job without one (``kind``: an
        event's, or "unavailable"; one of ours running runs on: its finish answers)."""
        if kind and job.owned and job.state == "running":
            return
        self._remove(job)
        waiters, job.waiters = job.waiters, set()
        if kind and job.owned:
            jobs.call_dropped(job.release())
            if kind == "dropped":
                self._books.count(Counter.ABANDONED)
        if kind == "busy":  # rule 3: waited longer than `wait` (Redis's clock said so)
            waited = [time.monotonic() - job.queued_mono] if job.owned else []
            self._books.gave_up(waited, _told(waiters))  # the error: from _given_up
        elif kind == "closed":
            self._books.count(Counter.REFUSED_CLOSED, _told(waiters))
            error = jobs.stopped()
        elif kind == "unavailable":
            self._books.count(Counter.REFUSED_UNAVAILABLE, _told(waiters))
            error = CoordinatorUnavailable(Wording.LOST_WAITING, self._settings.probe_every)
        elif kind == "expired":
            error = RunnerLost(Wording.EXPIRED)
        elif kind not in ("", "dropped"):
            error = RunnerLost(Wording.RUNNER_LOST)
        if kind != "dropped":  # nobody waits on a dropped job
            if job.key in self.admissions.values():  # a join's reply may still be on its way
                self._finished[job.id] = (time.monotonic(), job.key, result, error)
            jobs.deliver(waiters, result, error)
        if job.local_hold is not None:  # the fallback pool counted it: its joiners too
            job.local_hold(result, error)
            job.local_hold = None
        self._settle()

    async def _given_up(self, job: RedisJob) -> None:
        """Rule 3 gave up a queued job: its callers are told when a newcomer would take a
        slot, from the cluster's load read now (else every slot just taken, the queue full)."""
        s, books = self._settings, self._books
        with _about(job):  # the beat leaves it be meanwhile
            try:
                found = await self.link.load()
            except RedisError:
                retry = books.expected_start(s.queue_size, (0.0,) * s.slots, start=True)
            else:
                retry = found.load.until_free(books, found.queued, start=True)
        if self._holds(job):
            self._end(job, "busy", error=jobs.waited_too_long(s.wait, retry))

    async def _drop(self, job: RedisJob, kind: str) -> None:
        """End a job of ours that will never run, here and in Redis."""
        self._dropping.add(job.id)
        try:
            self._end(job, kind)
            await self._script("drop", job.key, job.id, kind)
        finally:
            self._dropping.discard(job.id)

    # --- rule 3's wait (expire.lua): Redis's clock decides; a `busy` event ends the job ------

    def _arm(self, job: RedisJob, delay: float) -> None:
        loop = asyncio.get_running_loop()
        job.timer = loop.call_later(delay, lambda: self.spawn(self._expire(job)))

    async def _expire(self, job: RedisJob) -> None:
        job.timer = None
        if not self._holds(job) or job.state != "queued":
            return
        with _about(job):
            reply = await self._script("expire", job.key, job.id)
        left = 0 if reply is None else int(reply[0]) / 1000  # seconds
        if left > 0 and self._holds(job) and job.state == "queued":
            self._arm(job, left)

    # --- an awaited job's outcome, from another process (collect.lua) ------------------------

    async def _collect(self, job: RedisJob) -> None:
        """Read a finished job's outcome, once, and answer this process's sharers."""
        if job.collecting:
            return
        job.collecting = True
        try:
            with _about(job):
                data = await self.link.collect(job.id)
        except RedisError as error:
            job.collecting = False
            self.failed(error)
            return
        if self._holds(job):
            self._settle_remote(job, data)

    def _settle_remote(self, job: RedisJob, data: str | None) -> None:
        """Answer this process's sharers with an outcome read from Redis."""
        if not data:
            self._end(job, "expired")
            return
        try:
            result, error = decode_outcome(data, decode=self._settings.decode)
        except Exception as exc:  # a broken decode hook, or a corrupt value
            result, error = None, exc
        self._end(job, result=result, error=error)

    # --- events: from a script's reply or this process's channel ---------------------------

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            self._on_event(event)

    def _on_event(self, event: Event) -> None:
        """``start``, ``done``, the endings; one ahead of its admission's reply waits."""
        job = self._jobs.get(event.job_id)
        if job is None or (not job.owned and event.job_id in self._pending):
            if self.admissions:  # its admission's reply may still be on its way
                self._early.setdefault(event.job_id, (time.monotonic(), []))[1].append(event)
            elif job is None:
                self._unclaimed(event)
            return
        if event.kind == "start":
            self._slot_given(job)
        elif event.kind == "done":
            if not job.owned:
                self.spawn(self._collect(job))
        elif event.kind == "busy" and not (job.owned and job.state == "running"):
            self.spawn(self._given_up(job))  # its callers are told from the load read there
        else:
            self._end(job, event.kind)

    def _unclaimed(self, event: Event) -> None:
        """An event about a job this process no longer knows."""
        if event.kind == "done":  # nobody here waits any more: take our copy off the shelf
            self.quietly(self.link.collect(event.job_id, read=False))
        elif event.kind == "start":  # ours, left from a call whose reply was lost: free it
            self.spawn(self._script("drop", event.key, event.job_id, "lost"))

    # --- the lease (beat.lua): the only poll, and a bounded one ----------------------------

    async def _beat_loop(self) -> None:
        """Beat while any job is in the table, three times per lease."""
        delay = every = self._settings.lease / 3
        try:
            while self._jobs:
                await asyncio.sleep(delay)
                delay = every
                if self.mode != REDIS:
                    if time.monotonic() - self._last_ok > self._settings.lease:
                        for job in self.jobs():
                            if not job.owned:  # its outcome cannot reach us any more
                                self._end(job, "unavailable")
                    continue
                next_lease_end = await self._beat_once()
                if next_lease_end is not None:  # wake when it ends, to reap it at once
                    delay = min(delay, max(0.02, next_lease_end + 0.02))
        finally:
            self._beat_task = None

    async def _beat_once(self, *, always: bool = False) -> float | None:
        """One beat now; the seconds until the next other lease ends, or None (docs/cluster.md).
        ``always``: with no job too, to end those a lost reply left in Redis as ours."""
        here = self.jobs()
        if not here and not always:
            return None  # nothing to tell Redis (an idle process stays out of its table)
        now = time.monotonic()
        args = [str(self._seq), str(len(here))]
        args += [arg for job in here for arg in _job_args(job, now)]
        args += [*self._pending, *self._dropping]
        self._beats += 1
        self._no_beat.clear()
        try:
            reply = await self._script("beat", *args)
        finally:
            self._beats -= 1
            if not self._beats:
                self._no_beat.set()
        if reply is None:
            return None
        next_ms, states, _ = reply
        for i, job in enumerate(here):
            self._reconcile(job, states[2 * i], states[2 * i + 1])
        return None if int(next_ms) < 0 else int(next_ms) / 1000

    def _reconcile(self, job: RedisJob, state: str, data: str) -> None:
        """Bring a job in step with what Redis reports (a vanished one after two beats)."""
        if not self._holds(job):
            return
        if state == "done":  # this beat took its outcome: no other read finds it
            job.collecting = True
            self._settle_remote(job, data)
        elif state == "ready":  # its outcome, in pieces, waits for a collect
            self.spawn(self._collect(job))
        elif job.inflight:
            return
        elif state != "gone":
            job.gone_seen = False
            if job.owned and state == "running":
                self._slot_given(job)  # its start event was lost
            elif not job.owned:
                job.state = state
        elif job.owned and job.state == "running":
            return  # its key is another job's now (see beat.lua): it finishes here
        elif job.gone_seen:
            self._end(job, "lost")
        else:
            job.gone_seen = True

    # --- health: the mode, the fallback, the probe --------------------------------------------

    def failed(self, error: BaseException) -> asyncio.Future[bool]:
        """Redis failed a call: whether it still answers (only a connection dropped), else the
        fallback until a probe succeeds. One judgement at a time."""
        if self._confirming is None:
            self._confirming = self.spawn(self._confirm(error))
        return self._confirming

    async def _confirm(self, error: BaseException) -> bool:
        try:
            if self.mode != REDIS or self.retired:  # judged already, or for good
                return self.mode == REDIS
            dropped = isinstance(error, redis_errors.ConnectionError)
            if dropped and not isinstance(error, redis_errors.TimeoutError):
                with contextlib.suppress(RedisError):
                    await self.link.refresh_idle()
                    await self.link.client().ping()
                    await self.link.subscribe()  # the channel's connection may be the dropped one
                    logger.info(
                        "PDF pool: a connection to Redis at %s was dropped (%s); a fresh one "
                        "answers",
                        self.link.where,
                        error,
                    )
                    self._confirming = None  # from here on, a failure is a new one
                    # a lost reply may have left a job of ours (unregister ends it, closing)
                    await self._beat_once(always=not self._closing.closed)
                    return True
            self._fall_back(error)
            return False
        finally:
            self._confirming = None

    def _fall_back(self, error: BaseException) -> None:
        """Switch to the fallback (one warning; docs/cluster.md), then probe until Redis is back."""
        if self.mode != REDIS or self.retired:
            return
        if self._fallback is not None:  # counted there before any caller can see the mode:
            for job in self.jobs():  # a caller thread reads it and admits there at once
                if job.owned and job.state == "running" and job.local_hold is None:
                    job.local_hold = self._fallback.hold(job.key, job.caller, job.size)
        self.mode = LOCAL_FALLBACK if self._fallback is not None else REFUSING
        self.failures[self._note(error)] += 1
        logger.warning(
            "PDF pool: Redis at %s %s (%s); %s",
            self.link.where,
            "refused a write" if self.trouble == REFUSED else "failed",
            self.last_error,
            "new jobs run in this process's own pool, with per-process limits"
            if self.mode == LOCAL_FALLBACK
            else "new jobs are refused (503) until it is back",
        )
        self.quietly(self.link.reset())
        for job in self.jobs():
            if job.owned and job.state == "queued":
                self._end(job, "unavailable")
        if self._probe is None:
            self._probe = self.spawn(self._watch())

    async def _watch(self) -> None:
        """One probe per ``probe_every``: a PING and writes (``probe.lua``)."""
        try:
            while not self.retired:
                await asyncio.sleep(self._settings.probe_every)
                try:
                    await self.link.reset()
                    await self.link.probe()
                    await self.link.subscribe()
                except RedisError as error:
                    self._note(error)  # its trouble may change: back, but read-only
                    continue
                logger.warning(
                    "PDF pool: Redis at %s is back; limits are shared again", self.link.where
                )
                self._last_ok = time.monotonic()
                self.mode, self.trouble = REDIS, None
                await self._beat_once(always=True)  # tell Redis at once what runs here
                return
        finally:
            self._probe = None

    def _note(self, error: BaseException) -> str:
        """Note why Redis fails: ``UNREACHABLE`` if it did not answer, ``REFUSED`` if it did."""
        silent = redis_errors.ConnectionError | redis_errors.TimeoutError | OSError
        denied = redis_errors.AuthenticationError | redis_errors.AuthorizationError  # answered
        refused = not isinstance(error, silent) or isinstance(error, denied)
        self.trouble = trouble = REFUSED if refused else UNREACHABLE
        self.last_error = f"{type(error).__name__}: {error}"
        return trouble

    async def _script(self, name: str, *args: str) -> list[Any] | None:
        """Run a script but ``admit``, act on its events; its reply, None if Redis failed."""
        if self.mode != REDIS:
            return None
        try:
            reply: list[Any] = await self.link.call(name, *args)
        except RedisError as error:
            self.failed(error)
            return None
        self._last_ok = time.monotonic()
        self._handle(events_of(reply[-1]))
        return reply

    # --- the table's bookkeeping --------------------------------------------------------------

    def _remove(self, job: RedisJob) -> None:
        job.disarm()
        with self._lock:
            if self._jobs.get(job.id) is job:
                del self._jobs[job.id]

    def _holds(self, job: RedisJob) -> bool:
        """Whether ``job`` is still the table's (not ended, not replaced)."""
        return self._jobs.get(job.id) is job

    # --- idle, stopping, retiring -----------------------------------------------------------

    def _settle(self) -> None:
        """Nothing in flight here: wake drain/stop; after ``lease`` idle seconds leave Redis."""
        if self.busy():
            return
        idle, self._idle_waiters = self._idle_waiters, []
        jobs.deliver(idle, None, None)
        if not self._closing.closed and self._release_timer is None and self.mode == REDIS:
            loop = asyncio.get_running_loop()
            self._release_timer = loop.call_later(self._settings.lease, self._release_if_idle)

    def _keep_redis(self) -> None:
        """Cancel letting go of Redis: a call began, or the side retires."""
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None

    def _release_if_idle(self) -> None:
        self._release_timer = None

        def still_idle() -> bool:
            return not (self.busy() or self._closing.closed)

        if still_idle():
            self.quietly(self.link.release(still_idle))

    async def stop_jobs(self) -> None:
        """Drop this process's queued jobs, leave the others', then cancel its running ones
        (their slots, freed first, would start a queued job of ours that never runs)."""
        while self.admissions:
            await asyncio.wait(set(self.admissions))
        calls: list[Coroutine[Any, Any, object]] = []
        running: list[RedisJob] = []
        for job in self.jobs():
            if job.owned and job.state == "running":
                waiters, job.waiters = job.waiters, set()
                self._books.count(Counter.REFUSED_CLOSED, _told(waiters))
                jobs.deliver(waiters, None, jobs.stopped())
                running.append(job)
            elif job.owned:
                calls.append(self._drop(job, "closed"))
            else:
                count = len(job.waiters)
                self._end(job, "closed")
                calls.append(self._script("leave", job.key, job.id, str(count), "0"))
        await asyncio.gather(*calls)
        for job in running:
            job.stop()

    async def retire(self) -> None:
        """Leave Redis for good: unregister, stop the beat and the probe, close."""
        if self.retired:
            return
        self._keep_redis()
        if self.link.used:
            await self._script("unregister")
        self.retired = True
        for task in (self._probe, self._beat_task):
            if task is not None:
                task.cancel()
        await self.link.close()

    # --- background tasks -----------------------------------------------------------------

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A task on the job loop, kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def quietly(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Spawn a call whose Redis failure changes nothing (clean-ups)."""

        async def run() -> None:
            with contextlib.suppress(RedisError):
                await coroutine

        self.spawn(run())


@contextlib.contextmanager
def _about(job: RedisJob) -> Iterator[None]:
    """A script about ``job`` is on its way: the beat does not judge the job meanwhile."""
    job.inflight += 1
    try:
        yield
    finally:
        job.inflight -= 1


def _told(waiters: set[Any]) -> int:
    """The callers a refusal reaches: not those cancelled before their leaving ran."""
    return sum(not waiter.left() for waiter in waiters)


def _job_args(job: RedisJob, now: float) -> list[str]:
    """One job as beat.lua takes it: KEY ID ROLE CALLER WAITERS STARTER AGE_MS SIZE."""
    running_for = job.running_for(now)
    if not job.owned:
        return [job.key, job.id, "a", "", str(len(job.waiters)), "0", "0", ""]
    if running_for is None or job.finishing:  # queued, or over: never counted again
        return [job.key, job.id, "o", "", "0", "0", "0", ""]
    starter = "1" if job.starter in job.waiters else "0"
    age = str(round(running_for * 1000))
    size = "" if job.size is None else str(job.size)
    return [job.key, job.id, "r", job.caller, str(len(job.waiters)), starter, age, size]


def _shown(term: str, value: str) -> str:
    """A term as the scripts keep it, for a message (``wait`` and ``lease`` in ms; -1: none)."""
    if term not in ("wait", "lease"):
        return value
    return "none" if value in ("", "-1") else f"{int(value) / 1000:g} s"
