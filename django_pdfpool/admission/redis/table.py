"""This process's record of what it runs, queues and waits on in a Redis-coordinated pool,
and of what arrived before the admission it concerns had its reply."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from ..snapshot import JobInfo
from .records import RedisJob
from .scripts import Event


class JobTable:
    """Jobs in flight here by id, admissions under way, and early arrivals. Job loop only,
    but for ``jobs`` and ``admissions``, which snapshots read from any thread: ``_lock``
    guards them."""

    def __init__(self, on_added: Callable[[], None]) -> None:
        self._on_added = on_added  # a job was added: the beat must be running
        self._lock = threading.Lock()
        self._jobs: dict[str, RedisJob] = {}  # guarded by _lock
        self.admissions: set[asyncio.Task[None]] = set()  # changed under _lock
        self.seq = 0  # numbers the job ids this process makes (see beat.lua)
        self.pending: set[str] = set()  # ids of jobs being admitted with an fn
        self.dropping: set[str] = set()  # ids of our jobs being dropped
        # events ahead of their admission's reply: id -> (first seen, events)
        self._early: dict[str, tuple[float, list[Event]]] = {}
        # outcomes of jobs that ended here, for a join whose reply comes after the end
        self._finished: dict[str, tuple[float, Any, BaseException | None]] = {}

    # --- the jobs ---------------------------------------------------------------

    def new_id(self) -> str:
        self.seq += 1
        return f"{self.seq}.{secrets.token_hex(4)}"  # numbered: see beat.lua

    def get(self, job_id: str) -> RedisJob | None:
        return self._jobs.get(job_id)

    def jobs(self) -> list[RedisJob]:
        with self._lock:
            return list(self._jobs.values())

    def add(self, job: RedisJob) -> RedisJob:
        with self._lock:
            self._jobs[job.id] = job
        self._on_added()
        return job

    def remove(self, job: RedisJob) -> None:
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        with self._lock:
            if self._jobs.get(job.id) is job:
                del self._jobs[job.id]

    def holds(self, job: RedisJob) -> bool:
        """Whether ``job`` is still this table's (not ended, not replaced)."""
        return self._jobs.get(job.id) is job

    def busy(self) -> bool:
        """Anything in flight here: a job, or an admission under way (any thread)."""
        with self._lock:
            return bool(self._jobs or self.admissions)

    # --- readings from any thread ------------------------------------------------

    def owned(self, state: str) -> int:
        with self._lock:
            return sum(job.owned and job.state == state for job in self._jobs.values())

    def owned_infos(self, now: float, wall: float) -> list[JobInfo]:
        with self._lock:
            return [job.info(now, wall) for job in self._jobs.values() if job.owned]

    def sharers(self, key: str) -> int:
        """This process's callers sharing ``key``'s job, less its starter."""
        with self._lock:
            return sum(job.sharers() for job in self._jobs.values() if job.key == key)

    # --- admissions and what arrives before their reply ---------------------------

    def admitting(self, task: asyncio.Task[None]) -> None:
        with self._lock:
            self.admissions.add(task)

    def admitted(self, task: asyncio.Task[None], timeout: float) -> list[Event]:
        """An admission ended. Return the early events no admission can claim any more:
        all of them once none is in flight, else those older than any reply can be."""
        with self._lock:
            self.admissions.discard(task)
            idle = not self.admissions
        if idle:
            stale, self._early = self._early, {}
            self._finished.clear()
        else:
            old = time.monotonic() - 2 * timeout
            stale = {job_id: early for job_id, early in self._early.items() if early[0] < old}
            for job_id in stale:
                del self._early[job_id]
            for job_id in [i for i, (at, _, _) in self._finished.items() if at < old]:
                del self._finished[job_id]
        return [event for _, events in stale.values() for event in events]

    def hold(self, event: Event) -> None:
        """Keep an event about a job whose admission's reply may still be on its way."""
        self._early.setdefault(event.job_id, (time.monotonic(), []))[1].append(event)

    def take_held(self, job_id: str) -> list[Event]:
        return self._early.pop(job_id, (0.0, []))[1]

    def remember(self, job_id: str, result: Any, error: BaseException | None) -> None:
        """A job ended here: keep its outcome while a join's reply may still be on its way."""
        if self.admissions:
            self._finished[job_id] = (time.monotonic(), result, error)

    def recall(self, job_id: str) -> tuple[Any, BaseException | None] | None:
        found = self._finished.get(job_id)
        return None if found is None else (found[1], found[2])
