"""``KeptThreads``, for ASGI servers: a request's thread-sensitive sync code runs on a thread
kept from earlier requests, not on one Django's handler starts (and joins) for it: a thread
start holds the event loop until the new thread runs (docs/performance.md)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import ThreadSensitiveContext

from .types import ASGIApp, Receive, Scope, Send

Returned = TypeVar("Returned")  # what a submitted call returns

THREAD_NAME = "pdfpool-request"
NUMBERS = itertools.count(1)  # each kept thread's name: pdfpool-request-N_0


class RequestThread(ThreadPoolExecutor):
    """One thread, lent to one request at a time; counts the calls it has not finished."""

    def __init__(self, kept: KeptThreads) -> None:
        super().__init__(max_workers=1, thread_name_prefix=f"{THREAD_NAME}-{next(NUMBERS)}")
        self.kept = kept
        self.unfinished = 0  # guarded by kept._lock
        self.lent = True  # guarded by kept._lock

    def submit(self, fn: Callable[..., Returned], /, *args: Any, **kwargs: Any) -> Future[Returned]:
        with self.kept._lock:
            self.unfinished += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:  # shut down at interpreter exit (one past keep is never lent)
            with self.kept._lock:
                self.unfinished -= 1
            raise
        future.add_done_callback(self._finished)  # before asyncio's own callback is added
        return future

    def _finished(self, future: Future[Any]) -> None:
        with self.kept._lock:
            self.unfinished -= 1
            done = not self.unfinished and not self.lent
        if done:  # the request ended before this call did
            self.kept._idle_again(self)


class KeptThreads:
    """ASGI middleware: ``PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))``.

    An HTTP request borrows a thread, given back once it has finished the request's calls; at
    most ``keep`` wait for the next. Tasks a request starts must end with it: their
    thread-sensitive calls after it raise RuntimeError (asgiref's rule; docs/deployment.md).
    """

    def __init__(self, app: ASGIApp, *, keep: int = 32) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be a whole number of threads, 0 or more, not {keep!r}")
        self.app = app
        self.keep = keep
        self._lock = threading.Lock()
        self._idle: list[RequestThread] = []  # guarded by _lock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lent = self._borrow()
        try:
            # Django's handler enters its own ThreadSensitiveContext(), which inside this one
            # does nothing: its thread-sensitive calls go to the lent thread
            async with ThreadSensitiveContext(executor=lent):
                await self.app(scope, receive, send)
        finally:
            with self._lock:
                lent.lent = False
                done = not lent.unfinished
            if done:
                self._idle_again(lent)

    def waiting(self) -> int:
        """How many kept threads wait for a request now."""
        with self._lock:
            return len(self._idle)

    def _borrow(self) -> RequestThread:
        with self._lock:
            if self._idle:
                lent = self._idle.pop()
                lent.lent = True
                return lent
        return RequestThread(self)

    def _idle_again(self, lent: RequestThread) -> None:
        """Kept for the next request, or ended when ``keep`` threads already wait
        (``wait=False``: this may run on the thread itself, which cannot join itself)."""
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(lent)
                return
        lent.shutdown(wait=False)
