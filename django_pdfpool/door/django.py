"""The door inside Django, for ``AdmissionMiddleware``: under WSGI it decides before
``request.FILES`` or ``request.body`` is touched (after authentication, so the caller is
known), and times the body as it is read; under ASGI without ``PdfPoolDoor`` it still spares
a refused upload its parsing, staging and hashing. Also ``release_ticket``, called by
``@pdf_pooled`` as its call reaches the pool."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django.http import HttpRequest, HttpResponse

from ..conf import get_settings
from ..exceptions import BodyTimeout, UploadRejected
from ..responses import arefusal_answer, refusal_answer
from . import entry
from .entry import terms
from .headers import UploadHeaders, is_post
from .rules import DOOR, TIMED_OUT, Refusal, Terms, Ticket, closes_connection
from .steps import Call, Steps
from .views import PooledView, pooled_view

Entry = HttpResponse | Ticket | None
"""A refusal's answer, or the request goes in (with its ticket; None: not the door's)."""


def _pooled_view(request: HttpRequest) -> PooledView | None:
    """The pooled view of a POST the door has not decided yet, if any."""
    scope = getattr(request, "scope", None)
    if not is_post(request.method) or DOOR in request.META or (scope and DOOR in scope):
        return None
    if not get_settings().door:
        return None
    return pooled_view(request.path_info, getattr(request, "urlconf", None))


def _let_in(request: HttpRequest, ticket: Ticket) -> Entry:
    request.META[DOOR] = ticket
    stream = getattr(request, "_stream", None)
    if stream is not None and not hasattr(request, "scope"):  # WSGI: the body is still unread
        request._stream = TimedStream(stream, ticket, terms())  # type: ignore[assignment]
    return ticket


def _closing(request: HttpRequest, response: HttpResponse, refusal: Exception) -> HttpResponse:
    """Under ASGI, a 413 or 408 closes the connection (see ``asgi.door.send_refusal``);
    under WSGI ``Connection`` is the server's (PEP 3333: wsgiref refuses it with a 500)."""
    if closes_connection(refusal) and hasattr(request, "scope"):
        response["Connection"] = "close"
    return response


def entering(request: HttpRequest) -> Steps[Entry]:
    """The door for a request, sync or async (``steps.run_steps``, ``steps.arun_steps``): a pooled
    view's upload gets the pool's verdict from its headers, then a refusal's answer or its
    ticket; any other request is not the door's."""
    view = _pooled_view(request)
    if view is None:
        return None
    verdict: Refusal | Ticket
    try:
        upload = UploadHeaders.of(request.headers)
    except UploadRejected as rejected:
        verdict = rejected
    else:
        verdict = yield from entry.verdict(view, upload, request)
    if isinstance(verdict, Ticket):
        return _let_in(request, verdict)
    answer = partial(refusal_answer, request, verdict, view.answer)
    response = yield Call(answer, partial(arefusal_answer, request, verdict, view.answer))
    return _closing(request, response, verdict)


def release_ticket(request: HttpRequest) -> None:
    """Give back the place the door gave ``request`` (its call now counts in the pool)."""
    scope = getattr(request, "scope", None)
    ticket = (scope or {}).get(DOOR) or request.META.get(DOOR)
    if ticket is not None:
        ticket.release()


class TimedStream:
    """A WSGI body read against its ticket's deadline: each read counts its bytes, and
    one past the deadline raises ``BodyTimeout`` (408). A read the client never answers
    blocks in the server; the ticket's place is given back at the deadline all the same."""

    def __init__(self, stream: Any, ticket: Ticket, terms: Terms) -> None:
        self._stream, self._ticket, self._terms = stream, ticket, terms

    def _check(self) -> None:
        if time.monotonic() >= self._ticket.deadline(self._terms):
            self._ticket.time_out()
            raise BodyTimeout(TIMED_OUT)

    def _timed(self, read: Callable[[int], bytes], size: int) -> bytes:
        self._check()
        data = read(size)
        self._ticket.received += len(data)
        self._check()
        return data

    def read(self, size: int = -1) -> bytes:
        return self._timed(self._stream.read, size)

    def readline(self, size: int = -1) -> bytes:
        return self._timed(self._stream.readline, size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
