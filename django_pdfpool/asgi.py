"""The ASGI wrappers, ``PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))``: the
door before the first ``receive()``, a drain at shutdown, a request's sync code on a kept thread."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import itertools
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.conf.urls.i18n import is_language_prefix_patterns_used
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import ResolverMatch, set_script_prefix
from django.utils import translation
from django.utils.translation import get_language_from_path

from .admission import jobs
from .conf import get_settings
from .configured import adrain_pool, get_pool, peek_pool
from .door import Refusal, Ticket, arun_steps, through_door
from .exceptions import BodyTimeout, UploadTooLarge, Wording
from .record import RECORD, AdmissionRecord, pooled_route, sent_headers
from .responses import RefusalView, arefusal_answer
from .sandbox.extract import shutdown as shutdown_extraction

# The ASGI types, in the shape django-stubs gives Django's own handler (``asgiref.typing``'s
# TypedDicts do not fit under mypy strict, and the door adds a key of its own to a scope).
Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("django_pdfpool")

__all__ = [
    "ASGIApp", "KeptThreads", "Message", "PdfPoolDoor", "PoolLifespan", "Receive", "Scope", "Send",
]  # fmt: skip


class PdfPoolDoor:
    """``application = PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))``:
    uploads to ``@pdf_pooled`` views are refused before their body when the pool cannot take
    them; every other request goes to ``app`` untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        post = str(scope.get("method", "")).upper() == "POST"  # as Django's request.method
        route = None
        if scope["type"] == "http" and post and RECORD not in scope and get_settings().door:
            path_info = scope["path"].removeprefix(get_script_prefix(scope))
            i18n, _ = is_language_prefix_patterns_used(settings.ROOT_URLCONF)
            language = get_language_from_path(path_info) if i18n else None  # LocaleMiddleware's
            with translation.override(language) if language else contextlib.nullcontext():
                route = pooled_route(path_info)  # i18n_patterns resolve under it
        if route is None:
            await self.app(scope, receive, send)
            return
        func, view = route
        set_script_prefix(get_script_prefix(scope))  # as Django's handler: reverse() under it
        try:
            request = ASGIRequest(scope, io.BytesIO())  # the request before its body, asked once
        except UnicodeDecodeError:  # a query string Django's handler answers 400
            await self.app(scope, receive, send)
            return
        record = AdmissionRecord.read(sent_headers(request), view)
        request.META[RECORD] = record  # decided: AdmissionMiddleware lets its answer through
        # Django's code before Django (a session, a framework's authentication) on a thread of
        # its own, started at its first call: request_finished never closes its connections
        started = threading.Event()
        door_thread = ThreadPoolExecutor(1, "pdfpool-door", initializer=started.set)
        try:
            async with ThreadSensitiveContext(executor=door_thread):
                decided = await arun_steps(through_door(request, record, view, func))
        finally:
            if started.is_set():  # its connections closed on it, then it ends
                await asyncio.wrap_future(door_thread.submit(connections.close_all))
            door_thread.shutdown(wait=False)
        if decided is None:  # Django's answer
            await self.app(scope, receive, send)
            return
        if not isinstance(decided, Ticket):
            unread = receive if record.declares_body() else None  # read and dropped, then closed
            await send_refusal(request, send, decided, view.answer, unread)
            return
        body = _CountedBody(request, receive, send, view.answer, decided)
        try:
            await self.app({**scope, RECORD: record}, body.receive, body.send)
        finally:
            if record.release is not None:  # not given back by the call reaching the pool
                record.release()


@dataclass(slots=True)
class _CountedBody:
    """``receive`` and ``send`` for a body let in: past its ``limit`` 413, its deadline 408,
    the budget's bytes 503, then the app is told the client left and what it sends dropped."""

    _request: HttpRequest
    _receive: Receive
    _send: Send
    _answer: RefusalView | None
    ticket: Ticket
    answered: bool = False
    complete: bool = False

    async def receive(self) -> Message:
        if self.answered:
            return {"type": "http.disconnect"}
        if self.complete:
            return await self._receive()  # Django listening for a disconnect
        left = self.ticket.deadline(self.ticket.terms) - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            message = await asyncio.wait_for(self._receive(), left)
        except TimeoutError:
            self.ticket.release(timed_out=True)
            return await self._refuse(BodyTimeout(Wording.TIMED_OUT))
        if message["type"] == "http.request":
            if not self.ticket.arrived(len(message.get("body", b"")), self.ticket.terms):
                caller = self._request.META[RECORD].caller  # the pool's Retry-After for it
                pressure = await asyncio.to_thread(get_pool().pressure, None, caller)  # rare
                return await self._refuse(jobs.queue_full(pressure.retry_after))
            if self.ticket.received > self.ticket.limit:
                return await self._refuse(UploadTooLarge.over(self.ticket.terms.max_upload_size))
            self.complete = not message.get("more_body", False)
        return message

    async def _refuse(self, refusal: Refusal) -> Message:
        self.ticket.release()  # the rest of the body, dropped, holds no place
        await send_refusal(self._request, self._send, refusal, self._answer, self._receive)
        self.answered = True
        return {"type": "http.disconnect"}  # Django's handler stops reading here

    async def send(self, message: Message) -> None:
        if not self.answered:
            await self._send(message)


async def send_refusal(
    request: HttpRequest,
    send: Send,
    refusal: Refusal | HttpResponse,
    answer: RefusalView | None,
    unread: Receive | None,
) -> None:
    """Send ``refusal`` as Django's handler sends a view's answer (``_Answering``); with
    ``unread`` (the body not read in full), ``Connection: close`` and a ``linger``."""
    session = getattr(request, "session", None)  # the door's, as asked: its answer's too
    request.pdfpool_refusal = (refusal, answer, session)  # type: ignore[attr-defined]
    handler = _answering()

    async def sending(message: Mapping[str, Any]) -> None:
        last = message["type"] == "http.response.body" and not message.get("more_body")
        lingers = last and unread is not None  # the last message comes after the linger
        await send({**message, "more_body": True} if lingers else {**message})

    async with ThreadSensitiveContext():  # a request's sync hooks on a thread of their own
        response = await handler.get_response_async(request)
        if unread is not None:
            response["Connection"] = "close"
            if isinstance(response, HttpResponse) and not response.has_header("Content-Length"):
                response["Content-Length"] = str(len(response.content))  # its end, first
        await handler.send_response(response, sending)
    if unread is not None:
        await linger(unread, send)


class _Answering(ASGIHandler):
    """Django's ASGI handler with the door's answer in the view's place, through the project's
    middleware; no ``process_view``, no body, no request signals (docs/door.md)."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async)
        self._view_middleware: list[Any] = []  # the door decides before any view

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        return ResolverMatch(_answer, (), {})

    def make_view_atomic(
        self, view: Callable[..., HttpResponseBase]
    ) -> Callable[..., HttpResponseBase]:
        return view  # an answer, no view's work (ATOMIC_REQUESTS refuses an async view)


async def _answer(request: HttpRequest) -> HttpResponse:
    """The door's answer, in the view's place, with the session the door read."""
    refusal, answer, session = request.pdfpool_refusal  # type: ignore[attr-defined]
    if session is not None:  # SessionMiddleware gave the request a new one
        request.session = session
    if isinstance(refusal, HttpResponse):
        return refusal
    return await arefusal_answer(request, refusal, answer)


@functools.cache
def _answering() -> _Answering:
    """The handler, its middleware loaded once as Django's own (again when a setting changes)."""
    return _Answering()


@receiver(setting_changed)
def _reload(**kwargs: Any) -> None:
    _answering.cache_clear()


LINGER_SECONDS = 2.0  # many round trips: a client stops sending once it reads the answer
LINGER_BYTES = 4 * 1024 * 1024  # about Linux's largest send buffer: what a client has queued


async def linger(receive: Receive, send: Send) -> None:
    """End an answer sent once the client's unread body is read and dropped, it leaves, or
    ``LINGER_*`` run out: nginx's ``lingering_close``, so that no reset hides the answer."""
    left = LINGER_BYTES
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LINGER_SECONDS):
            while left > 0:
                message = await receive()
                left -= len(message.get("body", b""))
                if not message.get("more_body", False):
                    break  # the body is complete, or the client left (``http.disconnect``)
    await send({"type": "http.response.body", "body": b""})


class PoolLifespan:
    """Answers lifespan events: ``drain_timeout`` (None: ``configured.drain_timeout()``) s of
    drain at shutdown; ``close_on_signal=False`` leaves the stop signals' handlers alone."""

    def __init__(
        self, app: ASGIApp, *, drain_timeout: float | None = None, close_on_signal: bool = True
    ) -> None:
        self.app = app
        self.drain_timeout = drain_timeout
        self.close_on_signal = close_on_signal
        self._chained: dict[int, tuple[Any, Any]] = {}  # each signal's (ours, previous) handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.close_on_signal:
                    self._chain(asyncio.get_running_loop())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._unchain()
                await adrain_pool(self.drain_timeout)
                # the warm template, killed and reaped before the server exits (uvicorn
                # re-raises SIGTERM, so atexit hooks never run)
                await asyncio.to_thread(shutdown_extraction)
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _chain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Put our handler before the server's Python handler of each stop signal (SIG_DFL
        ends the process anyway, SIG_IGN stops nothing); only the main thread can set them."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(number)
            if not callable(previous):
                continue

            def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                # Not pool.close() here: a Python signal handler runs between two bytecodes
                # of the main thread, which may be holding the pool's lock at that moment.
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to close
                    loop.call_soon_threadsafe(_close_pool, signum)
                previous(signum, frame)

            signal.signal(number, handler)
            self._chained[number] = (handler, previous)

    def _unchain(self) -> None:
        """Put back the handlers ``_chain`` replaced (none off the main thread), unless ours was."""
        chained, self._chained = self._chained, {}
        for number, (ours, previous) in chained.items():
            if signal.getsignal(number) is ours:
                signal.signal(number, previous)


def _close_pool(signum: int) -> None:
    """On the server's loop, just after a stop signal: refuse new work from now on."""
    pool = peek_pool()
    if pool is not None:
        pool.close()
        logger.info("%s: the PDF pool accepts no new work", signal.Signals(signum).name)


Returned = TypeVar("Returned")  # what a submitted call returns

THREAD_NAME = "pdfpool-request"
NUMBERS = itertools.count(1)  # each kept thread's name: pdfpool-request-N_0


class RequestThread(ThreadPoolExecutor):
    """One thread, lent to one request at a time; idle again once the request and every call
    it was given have ended."""

    def __init__(self, kept: KeptThreads) -> None:
        super().__init__(max_workers=1, thread_name_prefix=f"{THREAD_NAME}-{next(NUMBERS)}")
        self.kept = kept
        self.holds = 0  # its request, and each call not finished; guarded by kept._lock

    def submit(self, fn: Callable[..., Returned], /, *args: Any, **kwargs: Any) -> Future[Returned]:
        future = super().submit(fn, *args, **kwargs)  # its request holds it meanwhile
        with self.kept._lock:
            self.holds += 1
        future.add_done_callback(self.let_go)  # before asyncio's own callback is added
        return future

    def let_go(self, future: Future[Any] | None = None) -> None:
        """A call (or the request) has ended: the last to end keeps the thread for the next
        request, or ends it past ``keep`` (``wait=False``: this may run on the thread itself)."""
        kept = self.kept
        with kept._lock:
            self.holds -= 1
            if self.holds:
                return
            if len(kept._idle) < kept.keep:
                kept._idle.append(self)
                return
        self.shutdown(wait=False)


SETTLE_SECONDS = 1.0  # a cancelled request's wait for its view to end as a client's leaving


def _leaving(left: asyncio.Future[Any], receive: Receive) -> Receive:
    """``receive``, or ``http.disconnect`` once ``left`` is set; the body's messages as they
    come (no task each: a cancel while it arrives is passed on after ``SETTLE_SECONDS``)."""
    body = [True]  # more of the body to come

    async def receiving() -> Message:
        if left.done():
            return {"type": "http.disconnect"}
        if body[0]:
            message = await receive()
            body[0] = message["type"] == "http.request" and message.get("more_body", False)
            return message
        got = asyncio.ensure_future(receive())
        either: set[asyncio.Future[Any]] = {got, left}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            got.cancel()
            raise
        if got.done():
            return got.result()
        got.cancel()
        return {"type": "http.disconnect"}

    return receiving


class KeptThreads:
    """A request borrows a thread for its sync calls; at most ``keep`` wait for the next.
    Tasks a request starts must end with it (asgiref's rule; docs/deployment.md)."""

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
        with self._lock:
            lent = self._idle.pop() if self._idle else RequestThread(self)
            lent.holds += 1
        left = asyncio.get_running_loop().create_future()  # set: the server cancelled us
        try:
            # Django's handler enters its own ThreadSensitiveContext(), which inside this one
            # does nothing: its thread-sensitive calls go to the lent thread
            async with ThreadSensitiveContext(executor=lent):
                request = asyncio.ensure_future(self.app(scope, _leaving(left, receive), send))
                try:
                    await asyncio.shield(request)
                except asyncio.CancelledError:
                    # Django's handler, cancelled, leaves its view's task running: told the
                    # client left, it cancels it (a sync view's wait on this loop with it)
                    # while the loop still runs (daphne stops it once its apps have ended)
                    left.set_result(None)
                    try:
                        await asyncio.wait({request}, timeout=SETTLE_SECONDS)
                    finally:  # then cancelled as before, a view stuck in sync code or not
                        request.cancel()
                    raise
        finally:
            lent.let_go()

    def waiting(self) -> int:
        """How many kept threads wait for a request now."""
        with self._lock:
            return len(self._idle)
