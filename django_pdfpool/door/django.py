"""The door inside Django, for ``AdmissionMiddleware``: under WSGI it decides before
``request.FILES`` or ``request.body`` is touched; under ASGI without ``PdfPoolDoor`` it
still spares a refused upload its parsing, staging and hashing. Also ``release_ticket``,
called by ``@pdf_pooled`` as its call reaches the pool."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from ..conf import get_settings
from ..exceptions import UploadRejected, UploadTooLarge
from ..responses import arefusal_answer, refusal_answer
from .entry import apressure, judge, pressure_now
from .headers import UploadHeaders
from .rules import DOOR, Ticket
from .views import PooledView, pooled_view

Entry = HttpResponse | Ticket | None
"""A refusal's answer, or the request goes in (with the place it took, if any)."""


def _pooled_view(request: HttpRequest) -> PooledView | None:
    """The pooled view of a POST the door has not decided yet, if any."""
    scope = getattr(request, "scope", None)
    if request.method != "POST" or DOOR in request.META or (scope and DOOR in scope):
        return None
    if not get_settings().door:
        return None
    return pooled_view(request.path_info, getattr(request, "urlconf", None))


def _let_in(request: HttpRequest, verdict: Ticket | None) -> Entry:
    request.META[DOOR] = verdict
    return verdict


def _closing(response: HttpResponse, refusal: Exception) -> HttpResponse:
    if isinstance(refusal, UploadTooLarge):  # only then: see door.asgi.send_refusal
        response["Connection"] = "close"
    return response


def enter(request: HttpRequest) -> Entry:
    """The door for a sync request (a blocking read of a Redis pool is fine here)."""
    view = _pooled_view(request)
    if view is None:
        return None
    try:
        upload = UploadHeaders.of(request.headers)
        verdict = judge(view, upload, pressure_now(view, upload))
    except UploadRejected as rejected:
        verdict = rejected
    if isinstance(verdict, Exception):
        return _closing(refusal_answer(request, verdict, view.answer), verdict)
    return _let_in(request, verdict)


async def aenter(request: HttpRequest) -> Entry:
    """The door for an async request: a Redis pool is read off the event loop."""
    view = _pooled_view(request)
    if view is None:
        return None
    try:
        upload = UploadHeaders.of(request.headers)
        verdict = judge(view, upload, await apressure(view, upload))
    except UploadRejected as rejected:
        verdict = rejected
    if isinstance(verdict, Exception):
        return _closing(await arefusal_answer(request, verdict, view.answer), verdict)
    return _let_in(request, verdict)


def release_ticket(request: HttpRequest) -> None:
    """Give back the place the door gave ``request`` (its call now counts in the pool)."""
    scope = getattr(request, "scope", None)
    ticket = (scope or {}).get(DOOR) or request.META.get(DOOR)
    if ticket is not None:
        ticket.release()
