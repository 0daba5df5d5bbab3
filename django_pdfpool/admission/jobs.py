"""A job in flight and its waiters, the job loop it runs on, and how its outcome and the
refusals reach every waiter: what both pools share of a job's life (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import CallerBusy, JobFault, PoolBusy, PoolClosed, Wording
from .ledger import Counter, JobInfo, Ledger
from .protocol import DropFn, ErrorObserver, JobFn

logger = logging.getLogger("django_pdfpool.pool")

# --- the job loop: one daemon thread per process, where every job runs ------------------

_lock = threading.Lock()  # guards starting the loop's thread
_loop: asyncio.AbstractEventLoop | None = None  # set under _lock once its thread runs


def get_job_loop() -> asyncio.AbstractEventLoop:
    """The job loop, its thread started if needed."""
    global _loop
    if (loop := _loop) is not None:
        return loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=_run, args=(loop,), name="pdfpool-jobs", daemon=True).start()
            _loop = loop
        return _loop


def _run(loop: asyncio.AbstractEventLoop) -> None:
    """The job loop's thread. What escapes a callback (a task a job left behind raising
    KeyboardInterrupt, say) or stops the loop (a job's ``loop.stop()``) is logged and the loop
    runs on: every job of the process runs here."""
    while not loop.is_closed():
        try:
            loop.run_forever()  # returns only once stopped
        except BaseException:
            logger.exception("the PDF pool's job loop went on after an escaping exception")
        else:
            logger.error("the PDF pool's job loop was stopped; it runs on")


def on_job_loop() -> bool:
    """Whether the caller runs on the job loop's thread (where nothing may block)."""
    with contextlib.suppress(RuntimeError):  # no running loop
        return asyncio.get_running_loop() is _loop
    return False


def call_in_job_loop(callback: Callable[..., Any], *args: Any) -> None:
    """Schedule ``callback(*args)`` on the job loop, from any thread."""
    get_job_loop().call_soon_threadsafe(callback, *args)


forgotten_in_child: weakref.WeakSet[Any] = weakref.WeakSet()  # pools, recorders: ``_forget()``


def _forget_after_fork() -> None:  # the child inherits the loop but not its thread, nor its jobs
    global _loop, _lock
    _loop, _lock = None, threading.Lock()
    for each in list(forgotten_in_child):
        each._forget()


os.register_at_fork(after_in_child=_forget_after_fork)

# --- a job and its waiters --------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Waiter:
    """One awaiting call: a future on the caller's own loop, settled only there."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.future = self.loop.create_future()

    def left(self) -> bool:
        """Its caller was cancelled, maybe before its loop got round to leaving: among a
        job's waiters, only a cancel settles the future (answers come once it is off them)."""
        return self.future.done()


@dataclass(slots=True, eq=False)
class JobRecord:
    """A job in flight: who shares it, what it owns, where it stands. Guarded by its pool
    (the local pool's lock, the Redis pool's job loop); ``task`` is set on the job loop."""

    key: str
    caller: str = ""
    fn: JobFn | None = None
    on_drop: DropFn | None = None
    starter: Waiter | None = None
    size: int | None = None  # bytes of the job's input, if its caller said
    ran: bool = field(default=False, init=False)  # fn was called (not so if cancelled first)
    stopped: bool = field(default=False, init=False)  # stop() cancelled it: no other cancel
    waiters: set[Any] = field(init=False)  # the starter's, then each sharer's Waiter
    state: str = "queued"  # then "running"; a local job ends "done"
    queued_mono: float = field(default_factory=time.monotonic, init=False)
    started_mono: float | None = field(default=None, init=False)
    task: asyncio.Task[Any] | None = field(default=None, init=False)
    timer: asyncio.TimerHandle | None = field(default=None, init=False)  # job loop: rule 3's

    def __post_init__(self) -> None:
        self.waiters = set() if self.starter is None else {self.starter}

    def sharers(self) -> int:  # waiters besides the starter
        return len(self.waiters) - (self.starter in self.waiters)

    def running_for(self, now: float) -> float | None:  # None while queued
        if self.state == "running" and self.started_mono is not None:
            return now - self.started_mono
        return None

    def disarm(self) -> None:  # on the job loop
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def stop(self) -> None:
        """On the job loop: the pool's stop() cancels its task, once ``fn`` is entered (a task
        not yet stepped would never call it: the cancel waits one turn of the loop)."""
        if self.task is not None and not self.ran and not self.task.done():
            self.task.get_loop().call_soon(self.stop)
        elif self.task is not None and self.task.cancel():  # not so if it had ended
            self.stopped = True  # read once the cancel lands, later on this loop

    def cancelled(self, task: asyncio.Task[Any]) -> bool:
        """Its task ended cancelled by the pool's ``stop()`` (any other cancel is a fault)."""
        return self.stopped and task.cancelled()

    def release(self) -> DropFn | None:
        """Let go of ``fn`` and ``on_drop``; return ``on_drop`` if ``fn`` was never called, for
        the caller to call outside any lock: exactly one of the two is called."""
        dropped = None if self.ran else self.on_drop
        self.fn = self.on_drop = None
        return dropped

    def info(self, now: float, wall: float) -> JobInfo:  # read at monotonic now, wall clock wall
        started = self.started_mono if self.state == "running" else None
        return JobInfo.at(
            self.key, self.caller, len(self.waiters), self.queued_mono, started, now, wall
        )


async def run_fn(job: JobRecord) -> Any:
    """A job's task: mark ``fn`` called (see ``release``), call it; any error is the job's
    failure (a JobFault for a BaseException that is no Exception), and only the pool's
    ``stop()`` ends it cancelled."""
    fn, job.ran = job.fn, True
    assert fn is not None  # a job's fn is let go only once it has ended
    try:
        return await fn()
    except Exception:
        raise
    except BaseException as exc:  # no sharer's code expects one: SystemExit, GeneratorExit...
        if isinstance(exc, asyncio.CancelledError):
            if job.stopped:
                raise
            raise JobFault(CANCELLED_ELSEWHERE) from exc
        raise JobFault(f"the job raised {type(exc).__name__}") from exc


CANCELLED_ELSEWHERE = "the job was cancelled, but not by the pool's stop()"


# --- the refusals both pools give, worded once ------------------------------------------

closing = functools.partial(PoolClosed, Wording.CLOSING)
stopped = functools.partial(PoolClosed, Wording.STOPPED)
caller_busy = functools.partial(CallerBusy, Wording.CALLER_BUSY)  # (retry_after)
queue_full = functools.partial(PoolBusy, Wording.QUEUE_FULL)  # (retry_after)


def waited_too_long(wait: float | None, retry_after: float) -> PoolBusy:
    limit = f"{wait:g} s" if wait is not None else "too long"
    return PoolBusy(Wording.WAITED.format(limit=limit), retry_after)


def nothing_to_join(key: str) -> ValueError:
    return ValueError(f"nothing to join for key {key!r}, and no fn to start a job")


# --- an outcome, to every waiter on its own loop ----------------------------------------


def ended(
    job: JobRecord, task: asyncio.Task[Any], books: Ledger
) -> tuple[Any, BaseException | None, float]:
    """A job's task ended (``on_drop`` called if ``fn`` never was, the end counted): its result
    or error (never CancelledError: sharers were not cancelled) and the seconds it took."""
    result, error = None, None if task.cancelled() else task.exception()
    if task.cancelled():  # by stop(), or as fn returned after its own task.cancel()
        error = stopped() if job.stopped else JobFault(CANCELLED_ELSEWHERE)
    elif error is None:
        result = task.result()
    call_dropped(job.release())
    took = time.monotonic() - (job.started_mono or job.queued_mono)
    books.ended(Counter.ended(job.cancelled(task), error), took, job.size)
    return result, error, took


def deliver(waiters: Iterable[Waiter], result: Any, error: BaseException | None) -> None:
    """Settle each waiter's future on its own loop, one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[Any]]] = {}
    for waiter in waiters:
        by_loop.setdefault(waiter.loop, []).append(waiter.future)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: its callers are gone
            loop.call_soon_threadsafe(_settle, futures, result, error)


def _settle(futures: list[asyncio.Future[Any]], result: Any, error: BaseException | None) -> None:
    for future in (future for future in futures if not future.done()):  # not cancelled since
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(own_copy(error))


def own_copy(error: BaseException) -> BaseException:
    """A sharer's own copy of ``error``, chained to it: no two sharers grow one traceback."""
    try:
        duplicate = copy.copy(error)  # cls(*args): an __init__ may word its args anew
        duplicate.args = error.args
    except Exception:  # an __init__ that its own args cannot call again
        try:
            duplicate = type(error).__new__(type(error))  # BaseException.__new__: no __init__
            duplicate.args = error.args
            duplicate.__dict__.update(getattr(error, "__dict__", {}))
        except Exception:
            return error  # better shared than lost
    duplicate.__cause__ = error
    duplicate.__context__ = None
    duplicate.__traceback__ = None
    return duplicate


# --- the users' hooks, contained: on the job loop a raising hook would stop every job ----


def call_dropped(*callbacks: DropFn | None) -> None:  # a failing one is logged, not raised
    for callback in callbacks:
        if callback is not None:
            _contained(callback, (), "a job's on_drop callback")


def report_failure(observer: ErrorObserver, key: str, error: BaseException) -> None:
    """Tell the pool's ``on_error`` observer of a failed job; a failing observer is logged."""
    _contained(observer, (key, error), "the pool's on_error observer")


def _contained(hook: Callable[..., object], args: tuple[Any, ...], what: str) -> None:
    try:
        hook(*args)
    except BaseException:  # SystemExit and KeyboardInterrupt included
        logger.exception("%s failed", what)


def log_failure(key: str, error: BaseException) -> None:  # on_error's default
    logger.warning("job %s failed: %r", key, error, exc_info=error)
