"""The door's decision, written once for the ASGI and WSGI adapters: from a request's
headers and the pool's ``Pressure``, refuse now or let the body in (docs/door.md).

The pool stays the authority: what the door lets in may still be refused once its body
has arrived. The door never refuses what the pool would admit, but for one deliberate
rule, ``SHED_UNDECLARED``: with every place taken, an upload that does not declare its
digest is refused although it might have joined a job in flight.
"""

from __future__ import annotations

import threading
from collections import Counter

from ..admission import delivery
from ..admission.snapshot import Pressure
from ..exceptions import PoolBusy, PoolClosed, UploadRejected, UploadTooLarge
from .headers import UploadHeaders

Refusal = PoolClosed | PoolBusy | UploadRejected

MULTIPART_SLACK = 64 * 1024  # bytes of form overhead allowed over MAX_UPLOAD_SIZE

DOOR = "django_pdfpool.door"
"""The key, in an ASGI scope or a WSGI environ, of what the door gave a request it let in:
its ``Ticket``, or None (it took no place). Its presence says the door has decided."""


def body_limit(max_upload_size: int, raw: bool) -> int:
    """The most body bytes an upload may send: the PDF, plus a form's overhead."""
    return max_upload_size if raw else max_upload_size + MULTIPART_SLACK


def too_large(max_upload_size: int) -> UploadTooLarge:
    """The 413 for an upload over ``MAX_UPLOAD_SIZE``, worded once."""
    return UploadTooLarge(f"PDFs up to {max_upload_size / 1024 / 1024:g} MiB are accepted.")


class Arrivals:
    """Requests let in whose bodies are still arriving: each holds a place it does not
    hold in the pool yet, so that a burst is not let in all at once; and the keys they
    declared, so that an identical upload right behind one joins it. Thread-safe."""

    __slots__ = ("_count", "_keys", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the two fields below
        self._count = 0
        self._keys: Counter[str] = Counter()  # declared keys of the bodies arriving

    @property
    def count(self) -> int:
        return self._count

    def carries(self, key: str | None) -> bool:
        """Whether a body arriving now declared ``key``: its job will be there to join."""
        with self._lock:
            return key is not None and key in self._keys

    def admit(self, free: int, key: str | None) -> Ticket | None:
        """A ticket if fewer than ``free`` bodies are arriving, else None."""
        with self._lock:
            if self._count >= free:
                return None
            self._count += 1
            if key is not None:
                self._keys[key] += 1
        return Ticket(self, key)

    def _release(self, key: str | None) -> None:
        with self._lock:
            self._count -= 1
            if key is not None:
                self._keys[key] -= 1
                if not self._keys[key]:
                    del self._keys[key]


class Ticket:
    """One arriving body's place; ``release()`` (idempotent) when its call reaches the
    pool or the request ends, whichever comes first."""

    __slots__ = ("_arrivals", "_lock", "key")

    def __init__(self, arrivals: Arrivals, key: str | None) -> None:
        self._arrivals: Arrivals | None = arrivals
        self._lock = threading.Lock()  # guards _arrivals
        self.key = key

    def release(self) -> None:
        with self._lock:
            arrivals, self._arrivals = self._arrivals, None
        if arrivals is not None:
            arrivals._release(self.key)


ARRIVING = Arrivals()
"""This process's bodies on their way in, for both adapters."""


def decide(
    upload: UploadHeaders,
    key: str | None,
    pressure: Pressure,
    arrivals: Arrivals,
    *,
    max_upload_size: int,
    shed_undeclared: bool,
) -> Refusal | Ticket | None:
    """A refusal, or the request goes in: with a ``Ticket`` when it takes a place, with
    None when it needs none (it joins a job in flight or arriving, or shedding is off).
    ``key``: the single-flight key the upload declares through its digest, if any."""
    if pressure.closed:
        return delivery.closing()
    declared = upload.declared_size
    if declared is not None and declared > body_limit(max_upload_size, upload.raw):
        return too_large(max_upload_size)
    if pressure.in_flight or arrivals.carries(key):
        return None  # it joins: no slot, no queue place
    ticket = arrivals.admit(pressure.free, key)
    if ticket is not None:
        return ticket
    if upload.digest is None and not shed_undeclared:
        return None  # it might join: the pool decides once the body is in
    return delivery.queue_full(pressure.retry_after)
