"""A refusal, from exception to response (``refusal_answer``, the one path every entry takes:
the view's ``answer=``, else ``REFUSAL_VIEW``); never a traceback or a path."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import NamedTuple, cast

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.utils.cache import patch_vary_headers
from django.utils.html import format_html

from .conf import get_settings
from .exceptions import ExtractionError, PoolMisconfigured, Refused, UploadRejected

__all__ = [
    "Described",
    "Failure",
    "RefusalView",
    "default_refusal_view",
    "describe",
    "error_answer",
    "html_answer",
    "json_answer",
]

Failure = Refused | ExtractionError | UploadRejected
"""Everything the app answers in a view's place."""

RefusalView = Callable[[HttpRequest, Failure], HttpResponse | Awaitable[HttpResponse]]
"""``view(request, exception) -> HttpResponse`` (or an async one): how a failure is answered. The
``REFUSAL_VIEW`` setting is one; ``@pdf_pooled(answer=...)`` takes one for one view."""

MISCONFIGURED = "The PDF service is misconfigured; its operators have been told."

TITLES: dict[str | int, str] = {  # the HTML page's title: by code, else by status
    "no_upload": "No PDF received",
    "digest_mismatch": "The PDF does not match its digest",
    "bad_digest": "The digest header cannot be read",
    "repeated_header": "A header was sent twice",
    400: "This upload cannot be accepted",
    408: "The upload took too long",
    411: "The upload needs a Content-Length",
    413: "PDF too large",
    422: "This PDF cannot be read",
    429: "You already have a PDF in progress",
    503: "Busy: please try again shortly",
}

_PAGE = (  # the HTML answer: title, message and code escaped by format_html
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
    "<body><h1>{title}</h1><p>{message}{retry}</p><p><small>code: {code}</small></p></body></html>"
)


class Described(NamedTuple):
    """A failure as a client is told it; ``retry_after`` in whole seconds (at least 1)."""

    status: int
    code: str
    message: str
    retry_after: int | None


def describe(error: Failure) -> Described:
    """What every answer, the library's or an integration's, says of ``error``: its class's
    ``status`` (503, 429, 422, 400/408/411/413), code, message and retry time."""
    if isinstance(error, ExtractionError):
        return Described(error.status, error.code, error.message, None)
    if isinstance(error, UploadRejected):
        return Described(error.status, error.code, str(error), None)
    # a deployment error's details (namespace, settings) are for the operators' log only
    message = MISCONFIGURED if isinstance(error, PoolMisconfigured) else str(error)
    return Described(error.status, error.code, message, max(1, math.ceil(error.retry_after)))


def json_answer(request: HttpRequest, exception: Failure) -> HttpResponse:
    """``{"error": code, "message": message, "retry_after": seconds}`` (and ``Retry-After``)
    whatever the client accepts (for APIs)."""
    said = describe(exception)
    body: dict[str, object] = {"error": said.code, "message": said.message}
    if said.retry_after is not None:
        body["retry_after"] = said.retry_after
    return JsonResponse(body, status=said.status, headers=_retry_after(said))


def html_answer(request: HttpRequest, exception: Failure) -> HttpResponse:
    """A small standalone HTML page saying the same."""
    said = describe(exception)
    title = TITLES.get(said.code) or TITLES.get(said.status, "Error")
    retry = "" if said.retry_after is None else f" Try again in {said.retry_after} s."
    page = format_html(_PAGE, title=title, message=said.message, retry=retry, code=said.code)
    return HttpResponse(page, status=said.status, headers=_retry_after(said))


def _retry_after(said: Described) -> dict[str, str]:
    return {} if said.retry_after is None else {"Retry-After": str(said.retry_after)}


def error_answer(request: HttpRequest, exception: Failure) -> HttpResponse:
    """The default ``REFUSAL_VIEW``: JSON for clients that accept it (``*/*`` too), else HTML;
    ``Vary: Accept``, as it was chosen by that header."""
    bare = HttpRequest()  # Accept without its ranges' parameters (a charset, a version): they
    bare.META["HTTP_ACCEPT"] = ",".join(  # do not turn a JSON client away (DRF's negotiation)
        f"{t.main_type}/{t.sub_type};q={t.quality}" for t in request.accepted_types
    )
    preferred = bare.get_preferred_type(["application/json", "text/html"])
    response = (json_answer if preferred == "application/json" else html_answer)(request, exception)
    patch_vary_headers(response, ["Accept"])
    return response


default_refusal_view = error_answer  # the REFUSAL_VIEW setting's default, by its dotted path


def answers_quickly(answer: RefusalView | None) -> bool:
    """Whether ``answer`` (or ``REFUSAL_VIEW``) is one of this module's own: no template, no
    database, safe to call on an event loop."""
    return (answer or get_settings().refusal_view) in (json_answer, html_answer, error_answer)


def refusal_answer(
    request: HttpRequest, error: Failure, answer: RefusalView | None = None
) -> HttpResponse:
    """The answer in a view's place, from ``answer`` (a view's ``answer=``) or else
    ``REFUSAL_VIEW``: every entry answers through here (or its async twin)."""
    view = answer or get_settings().refusal_view
    if iscoroutinefunction(view):  # an async view, as Django runs one from sync code
        return _response(view, async_to_sync(view)(request, error))
    return _response(view, view(request, error))


async def arefusal_answer(
    request: HttpRequest, error: Failure, answer: RefusalView | None = None
) -> HttpResponse:
    """``refusal_answer`` from async code: a project's answer awaited, or run in a worker
    thread (it may render templates or read the database)."""
    view = answer or get_settings().refusal_view
    if iscoroutinefunction(view):
        return _response(view, await view(request, error))
    if answers_quickly(answer):
        return refusal_answer(request, error, answer)
    return await sync_to_async(_answered_in_thread, thread_sensitive=False)(request, error, answer)


def _answered_in_thread(
    request: HttpRequest, error: Failure, answer: RefusalView | None
) -> HttpResponse:
    """``refusal_answer``, its database connections then closed as Django closes a view's (its
    ``request_finished`` never reaches a worker thread)."""
    try:
        return refusal_answer(request, error, answer)
    finally:
        close_old_connections()


def _response(view: object, response: object) -> HttpResponse:
    if not isinstance(response, HttpResponseBase):
        name = getattr(view, "__qualname__", repr(view))
        raise TypeError(f"The refusal view {name} returned {response!r}, not an HttpResponse.")
    return cast(HttpResponse, response)
