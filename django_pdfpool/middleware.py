"""``AdmissionMiddleware``: the door inside Django, before the body is parsed (under WSGI
the body read against its deadline); it also answers refusals and extraction errors views raise."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from .admission.jobs import queue_full
from .conf import get_settings
from .configured import get_pool
from .door import Call, Steps, Terms, Ticket, arun_steps, run_steps, through_door
from .exceptions import (
    BodyTimeout,
    ExtractionError,
    LengthRequired,
    PoolBusy,
    Refused,
    UploadRejected,
    Wording,
)
from .record import RECORD, AdmissionRecord, PooledView, UploadHeaders, pooled_route, sent_headers
from .responses import arefusal_answer, refusal_answer

GetResponse = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]


class AdmissionMiddleware:
    """Sync and async: put it last in MIDDLEWARE. It needs ``request.user`` and decides in its
    own call, before ``CsrfViewMiddleware``'s ``process_view`` reads the form. Requests to
    other views pass with one URL resolution (see docs/door.md for its cost)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        scope = getattr(request, "scope", None) or {}
        undecided = RECORD not in scope and RECORD not in request.META
        route = None
        if request.method == "POST" and undecided and get_settings().door:
            route = pooled_route(request.path_info, getattr(request, "urlconf", None))
        if route is None:
            return self.get_response(request)  # not the door's: a coroutine when async
        if self.async_mode:
            return arun_steps(self._through(request, route, bool(scope)))
        return run_steps(self._through(request, route, False))

    def _through(
        self, request: HttpRequest, route: tuple[Any, PooledView], asgi: bool
    ) -> Steps[HttpResponse]:
        """The door, then the view, sync or async: a refusal's answer, or the view's
        response with the door's place given back (its call counts in the pool by then)."""
        func, view = route
        record = request.META[RECORD] = AdmissionRecord.read(sent_headers(request), view)
        upload = record.headers
        chunks = isinstance(upload, UploadHeaders) and upload.raw and upload.chunked
        if chunks and not asgi and not view.parsers:  # WSGI reads none: the view's 411 (DRF's 400)
            record.headers = LengthRequired(Wording.CHUNKED_UNREAD)
        decided = yield from through_door(request, record, view, func)
        if decided is not None and not isinstance(decided, Ticket):  # None: Django's answer
            # no Connection: under ASGI the body is read by now, under WSGI it is the server's
            return (yield from _answered(request, decided, view))
        stream, timed = getattr(request, "_stream", None), None
        if decided is not None and stream is not None and not asgi:  # WSGI: the body unread
            timed = TimedStream(stream, decided, decided.terms, record.caller)
            request._stream = timed  # type: ignore[assignment]
        try:
            respond = partial(self.get_response, request)  # sync in a sync chain, else async
            response: HttpResponse = yield Call(respond, cast(Any, respond))
            if timed is None or timed.refused is None:
                return response
            return (yield from _answered(request, timed.refused, view))  # whoever read the body
        finally:
            if record.release is not None:  # not given back by the call reaching the pool
                record.release()

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """The answer for a refusal, an extraction error or a rejected upload (``extract_pooled``'s
        ``UploadTooLarge``); None lets anything else through."""
        if isinstance(exception, Refused | ExtractionError | UploadRejected):
            return refusal_answer(request, exception)
        return None


def _answered(
    request: HttpRequest, refusal: Refused | UploadRejected | HttpResponse, view: PooledView
) -> Steps[HttpResponse]:
    """``refusal`` answered in the view's place, rendered as Django renders a view's template
    response (it renders none a middleware returns)."""
    answer = refusal
    if not isinstance(answer, HttpResponse):
        said = (request, answer, view.answer)
        answer = yield Call(partial(refusal_answer, *said), partial(arefusal_answer, *said))
    render = getattr(answer, "render", None)
    return (yield Call.django(render)) if callable(render) else answer


class TimedStream:
    """A WSGI body read against its ticket: a read past the deadline raises ``BodyTimeout``
    (408), past the budget's bytes ``PoolBusy``, kept as ``refused`` (the request's answer,
    whoever read); at the deadline the place goes back. ``caller``: whose Retry-After it is."""

    def __init__(
        self, stream: Any, ticket: Ticket, terms: Terms, caller: str | None = None
    ) -> None:
        self._stream, self._ticket, self._terms, self._caller = stream, ticket, terms, caller
        self.refused: BodyTimeout | PoolBusy | None = None

    def _check(self) -> None:
        if time.monotonic() >= self._ticket.deadline(self._terms):
            self._ticket.release(timed_out=True)
            self.refused = BodyTimeout(Wording.TIMED_OUT)
            raise self.refused

    def _timed(self, read: Callable[[int], bytes], size: int, line: bool = False) -> bytes:
        """``read(size)`` in pieces of what half of ``body_timeout`` earns at the rate: a
        server's read blocks until it has them all, so each piece counts as it comes."""
        piece = max(1, int(self._terms.body_min_rate * self._terms.body_timeout / 2))
        pieces: list[bytes] = []
        left = size if size >= 0 else None
        while left is None or left > 0:
            self._check()
            data = read(piece if left is None else min(piece, left))
            if not self._ticket.arrived(len(data), self._terms):  # past the budget's bytes
                self.refused = queue_full(get_pool().pressure(None, self._caller).retry_after)
                raise self.refused
            self._check()
            pieces.append(data)
            left = None if left is None else left - len(data)
            if not data or (line and data.endswith(b"\n")):
                break
        return b"".join(pieces)

    def read(self, size: int = -1) -> bytes:
        return self._timed(self._stream.read, size)

    def readline(self, size: int = -1) -> bytes:
        return self._timed(self._stream.readline, size, line=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
