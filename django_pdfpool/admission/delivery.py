"""How an outcome reaches callers, for both pools: refusals, results and errors delivered on
each waiter's own loop, each sharer with an exception object of its own, and the hooks
(``on_drop``, ``on_error``) called in one place that contains their failures."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..exceptions import CallerBusy, PoolBusy, PoolClosed, Wording
from .counters import Counter
from .protocol import DropFn, ErrorObserver
from .records import Waiter

logger = logging.getLogger("django_pdfpool.pool")


# --- the refusals both pools give, worded once ------------------------------------------


def closing() -> PoolClosed:
    return PoolClosed(Wording.CLOSING)


def stopped() -> PoolClosed:
    return PoolClosed(Wording.STOPPED)


def caller_busy(retry_after: float) -> CallerBusy:
    return CallerBusy(Wording.CALLER_BUSY, retry_after)


def queue_full(retry_after: float) -> PoolBusy:
    return PoolBusy(Wording.QUEUE_FULL, retry_after)


def waited_too_long(wait: float | None, retry_after: float) -> PoolBusy:
    limit = f"{wait:g} s" if wait is not None else "too long"
    return PoolBusy(Wording.WAITED.format(limit=limit), retry_after)


def counter_of(refusal: PoolBusy | PoolClosed | CallerBusy) -> Counter:
    """The counter a refusal given for a pool (by a door, say) counts in."""
    return Counter.refused(refusal)


def nothing_to_join(key: str) -> ValueError:
    return ValueError(f"nothing to join for key {key!r}, and no fn to start a job")


# --- a finished job's outcome -----------------------------------------------------------


def outcome_of(task: asyncio.Task[Any], stopping: bool) -> tuple[Any, BaseException | None]:
    """A finished job task's result or error; cancelled: PoolClosed when the pool is
    stopping, else an error saying so (never CancelledError: sharers were not cancelled)."""
    if task.cancelled():
        return None, stopped() if stopping else RuntimeError("the job was cancelled")
    error = task.exception()
    return (None, error) if error is not None else (task.result(), None)


def deliver(waiters: Iterable[Waiter], result: Any, error: BaseException | None) -> None:
    """Settle each waiter's future on its own loop: one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[Any]]] = {}
    for waiter in waiters:
        by_loop.setdefault(waiter.loop, []).append(waiter.future)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: its callers are gone
            loop.call_soon_threadsafe(_settle, futures, result, error)


def _settle(futures: list[asyncio.Future[Any]], result: Any, error: BaseException | None) -> None:
    for future in futures:
        if future.done():  # cancelled meanwhile
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(own_copy(error))


def own_copy(error: BaseException) -> BaseException:
    """A fresh exception object for one sharer, chained to the original, so that
    sharers never share (and grow) one traceback."""
    try:
        duplicate = copy.copy(error)
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


# --- the hooks --------------------------------------------------------------------------


def call_dropped(*callbacks: DropFn | None) -> None:
    """Call each ``on_drop`` given; a failing one is logged, never raised."""
    for callback in callbacks:
        if callback is not None:
            _contained(callback, (), "a job's on_drop callback")


def report_failure(observer: ErrorObserver, key: str, error: BaseException) -> None:
    """Tell the pool's ``on_error`` observer of a failed job; a failing observer is logged."""
    _contained(observer, (key, error), "the pool's on_error observer")


def _contained(hook: Callable[..., object], args: tuple[Any, ...], what: str) -> None:
    """Call a user's hook where it cannot hurt: whatever it raises, SystemExit and
    KeyboardInterrupt included, is logged and goes no further (on the job loop it would
    stop every job of the process)."""
    try:
        hook(*args)
    except BaseException:
        logger.exception("%s failed", what)


def log_failure(key: str, error: BaseException) -> None:
    """The default observer: a fault nobody watches is still logged."""
    logger.warning("job %s failed: %r", key, error, exc_info=error)
