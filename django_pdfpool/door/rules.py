"""The door's decision, written once for the ASGI and WSGI adapters: from a request's
headers and the pool's ``Pressure``, give the pool's own answer now, or let the body in
holding a ``Ticket`` (docs/door.md).

The door applies the pool's rules earlier, never other rules: 503 closed, 413, 429 for a
caller with a job in flight, 503 busy only for what certainly cannot join. An upload that
might join (its key unknown before its body) is let in within a bounded budget of bodies
in flight; past it the door sheds, and counts that apart from the pool's refusals. Every
ticket has a deadline (``BODY_TIMEOUT`` plus a second per ``BODY_MIN_RATE`` bytes, at most
``BODY_TIMEOUT_MAX``), past which its place goes back, whether or not the body ever arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..admission import delivery
from ..admission.snapshot import Pressure
from ..exceptions import (
    BodyTimeout,
    CallerBusy,
    PoolBusy,
    PoolClosed,
    UploadRejected,
    UploadTooLarge,
    Wording,
)
from .headers import UploadHeaders

Refusal = PoolClosed | PoolBusy | CallerBusy | UploadRejected
Kind = Literal["place", "budget"]

MULTIPART_SLACK = 64 * 1024  # bytes of form overhead allowed over MAX_UPLOAD_SIZE

DOOR = "django_pdfpool.door"
"""The key, in an ASGI scope or a WSGI environ, of the ``Ticket`` the door gave a request
it let in. Its presence says the door has decided."""


def body_limit(max_upload_size: int, raw: bool) -> int:
    """The most body bytes an upload may send: the PDF, plus a form's overhead."""
    return max_upload_size if raw else max_upload_size + MULTIPART_SLACK


TIMED_OUT = Wording.TIMED_OUT
"""The 408's message, for both adapters."""


def closes_connection(refusal: Exception) -> bool:
    """Whether an ASGI answer to ``refusal`` closes the connection: a 413 (the rest of the
    body is over the limit) or a 408 (the rest is not coming). Any other keeps it open: a
    client that sent a small body anyway would lose the answer to a reset."""
    return isinstance(refusal, UploadTooLarge | BodyTimeout)


def too_large(max_upload_size: int) -> UploadTooLarge:
    """The 413 for an upload over ``MAX_UPLOAD_SIZE``, worded once."""
    return UploadTooLarge(Wording.TOO_LARGE.format(mib=max_upload_size / 1024 / 1024))


@dataclass(frozen=True)
class Terms:
    """The settings the door decides by."""

    max_upload_size: int
    budget: int  # bodies that may join, let in past the places
    budget_bytes: int  # their declared bytes together
    body_timeout: float  # seconds a body has, before its rate extends it
    body_min_rate: int  # bytes a second that earn another second
    body_timeout_max: float = 300.0  # seconds a body has in all, however fast it comes


@dataclass(frozen=True)
class HeldInfo:
    """One body on its way in, for the status page and the metrics."""

    caller: str
    kind: Kind
    received: int  # bytes so far
    age: float  # seconds since it was let in
    left: float  # seconds until its deadline


class Ticket:
    """One arriving body's place or budget entry; ``release()`` (idempotent) when its
    call reaches the pool, its request ends, or its deadline passes."""

    __slots__ = (
        "_arrivals", "_lock", "_watchers", "key", "kind", "received", "reserved", "started", "who",
    )  # fmt: skip

    def __init__(
        self, arrivals: Arrivals, who: str, kind: Kind, key: str | None, reserved: int
    ) -> None:
        self._arrivals: Arrivals | None = arrivals
        self._lock = threading.Lock()  # guards _arrivals and _watchers
        self._watchers: list[Callable[[], object]] = []  # called once, at the release
        self.who, self.kind, self.key, self.reserved = who, kind, key, reserved
        self.received = 0  # body bytes so far, counted by the adapter
        self.started = time.monotonic()

    def deadline(self, terms: Terms) -> float:
        """When the body must be in (monotonic): mod_reqtimeout's ``body=T-M,MinRate=R``,
        so that a trickle just above the rate holds its place ``M`` seconds at most."""
        earned = terms.body_timeout + self.received / terms.body_min_rate
        return self.started + min(earned, terms.body_timeout_max)

    @property
    def released(self) -> bool:
        return self._arrivals is None

    def release(self) -> None:
        self._let_go()

    def time_out(self) -> None:
        """Release it as past its deadline (counted once, whoever notices first)."""
        arrivals = self._let_go()
        if arrivals is not None:
            with arrivals._lock:
                arrivals.timed_out += 1

    def _watch(self, watcher: Callable[[], object]) -> bool:
        """Call ``watcher`` at the release; False (and no call) if it is released already."""
        with self._lock:
            if self._arrivals is not None:
                self._watchers.append(watcher)
                return True
        return False

    def _unwatch(self, watcher: Callable[[], object]) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def wait_released(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for the release (a sync request's thread)."""
        gone = threading.Event()
        if not self._watch(gone.set):
            return True
        if gone.wait(max(0.0, timeout)):
            return True
        self._unwatch(gone.set)
        return self.released

    async def areleased(self, timeout: float) -> bool:
        """Await the release up to ``timeout`` seconds on this loop, woken by whichever
        thread releases it (no thread waits)."""
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not gone.done():
                gone.set_result(None)

        def watcher() -> None:
            loop.call_soon_threadsafe(wake)

        if not self._watch(watcher):
            return True
        try:
            await asyncio.wait_for(gone, max(0.0, timeout))
        except TimeoutError:
            self._unwatch(watcher)
            return self.released
        except BaseException:  # cancelled: the client left
            self._unwatch(watcher)
            raise
        return True

    def _let_go(self) -> Arrivals | None:
        with self._lock:
            arrivals, self._arrivals = self._arrivals, None
            watchers, self._watchers = self._watchers, []
        if arrivals is not None:
            arrivals._release(self)
        for watcher in watchers:
            with contextlib.suppress(RuntimeError):  # a waiter's loop that has closed
                watcher()
        return arrivals


class Arrivals:
    """This process's bodies let in and still arriving: places (each a place the pool
    will be asked for) and budget entries (bodies that may join), with the keys they
    declared, what was shed and what timed out. Thread-safe."""

    __slots__ = ("_keys", "_lock", "_tickets", "shed", "timed_out")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards every field
        self._tickets: set[Ticket] = set()
        self._keys: Counter[str] = Counter()  # declared keys of the bodies arriving
        self.shed = 0  # refused from the headers past the budget (they might have joined)
        self.timed_out = 0  # let in, then past their deadline

    @property
    def count(self) -> int:
        return len(self._tickets)

    def carries(self, key: str | None) -> bool:
        """Whether a body arriving now declared ``key``: its job will be there to join."""
        with self._lock:
            return key is not None and key in self._keys

    def may_start_unknown(self) -> bool:
        """Whether a body holding a place has a key nobody knows yet (it may start any job)."""
        with self._lock:
            return any(t.kind == "place" and t.key is None for t in self._tickets)

    def own(self, who: str) -> Ticket | None:
        """The body ``who`` has arriving, if any (one per caller: a second waits for it)."""
        with self._lock:
            return next((t for t in self._tickets if t.who == who), None)

    def holds_place(self, who: str) -> bool:
        """Whether ``who`` has a body arriving on a place."""
        with self._lock:
            return any(t.kind == "place" and t.who == who for t in self._tickets)

    def place(self, free: int, who: str, key: str | None) -> Ticket | None:
        """A place if fewer than ``free`` are taken by arriving bodies and ``who`` holds
        none (one job per caller: a second body of theirs can only join)."""
        with self._lock:
            places = [t for t in self._tickets if t.kind == "place"]
            if len(places) >= free or any(t.who == who for t in places):
                return None
            return self._take(who, "place", key, 0)

    def budget(self, who: str, key: str | None, size: int, terms: Terms) -> Ticket | None:
        """A budget entry, if the count and the bytes allow and ``who`` holds none."""
        with self._lock:
            entries = [t for t in self._tickets if t.kind == "budget"]
            if len(entries) >= terms.budget or any(t.who == who for t in entries):
                return None
            if sum(t.reserved for t in entries) + size > terms.budget_bytes:
                return None
            return self._take(who, "budget", key, size)

    def _take(self, who: str, kind: Kind, key: str | None, size: int) -> Ticket:
        ticket = Ticket(self, who, kind, key, size)
        self._tickets.add(ticket)
        if key is not None:
            self._keys[key] += 1
        return ticket

    def count_shed(self) -> None:
        with self._lock:
            self.shed += 1

    def expire(self, terms: Terms, now: float | None = None) -> list[Ticket]:
        """Release every ticket past its deadline (so that a silent client holds nothing);
        the adapters answer those requests 408 when they next look."""
        now = time.monotonic() if now is None else now
        with self._lock:
            overdue = [t for t in self._tickets if t.deadline(terms) <= now]
        for ticket in overdue:
            ticket.time_out()
        return overdue

    def held(self, terms: Terms) -> list[HeldInfo]:
        """The bodies arriving now, oldest first; one past its deadline holds nothing, read
        or not, so it is released first (every reader agrees: status page, metrics)."""
        self.expire(terms)
        now = time.monotonic()
        with self._lock:
            tickets = sorted(self._tickets, key=lambda t: t.started)
        return [
            HeldInfo(t.who, t.kind, t.received, now - t.started, t.deadline(terms) - now)
            for t in tickets
        ]

    def _release(self, ticket: Ticket) -> None:
        with self._lock:
            self._tickets.discard(ticket)
            if ticket.key is not None:
                self._keys[ticket.key] -= 1
                if not self._keys[ticket.key]:
                    del self._keys[ticket.key]


ARRIVING = Arrivals()
"""This process's bodies on their way in, for both adapters."""


def decide(
    upload: UploadHeaders,
    key: str | None,
    pressure: Pressure,
    arrivals: Arrivals,
    *,
    who: str,
    known: bool,
    terms: Terms,
) -> tuple[Refusal | Ticket, bool]:
    """The pool's answer, or a ticket for the body; and whether a refusal is a shed (the
    budget's, not the pool's; the caller counts it, or first waits for its own body).
    ``key``: the single-flight key the upload declares, if any (and trusted); ``who``: the
    caller, or the address when ``known`` is False (the caller function could not tell
    before the body)."""
    if pressure.closed:
        return delivery.closing(), False
    declared = upload.declared_size
    limit = body_limit(terms.max_upload_size, upload.raw)
    if declared is not None and declared > limit:
        return too_large(terms.max_upload_size), False
    arrivals.expire(terms)
    busy = known and pressure.caller_busy
    size = limit if declared is None else declared

    def may_join() -> tuple[Refusal | Ticket, bool]:
        entry = arrivals.budget(who, key, size, terms)
        if entry is not None:
            return entry, False
        if busy:
            return delivery.caller_busy(pressure.caller_retry_after), True
        return delivery.queue_full(pressure.retry_after), True

    if key is not None:
        if pressure.in_flight or arrivals.carries(key):
            return may_join()  # it joins: no slot, no queue place, any caller
        if busy:
            return delivery.caller_busy(pressure.caller_retry_after), False
        ticket = arrivals.place(pressure.free, who, key)
        if ticket is not None:
            return ticket, False
        if arrivals.may_start_unknown() or arrivals.holds_place(who):
            return may_join()  # a body on its way may turn out to start this key's job
        return delivery.queue_full(pressure.retry_after), False
    if not busy:
        ticket = arrivals.place(pressure.free, who, None)
        if ticket is not None:
            return ticket, False
    return may_join()  # every place taken, or the caller busy: it can only join
