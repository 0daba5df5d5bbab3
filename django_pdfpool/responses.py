"""Answers a client can act on, as JSON or HTML, for the decorator and the middleware.
Only codes and messages meant for users reach the client, never a traceback or a path."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import cast

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.html import format_html

from .conf import get_settings
from .exceptions import CallerBusy, ExtractionError, PoolMisconfigured, Refused, UploadRejected

MISCONFIGURED = "The PDF service is misconfigured; its operators have been told."

TITLES: dict[str | int, str] = {  # by code, else by status
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


Answer = Callable[[HttpRequest, int, str, str, "float | None"], HttpResponse]
"""``answer(request, status, code, message, retry_after)``: how a view answers what it
could not do. ``@pdf_pooled(answer=...)`` takes one, to answer in a project's own pages."""


def _retry_seconds(retry_after: float | None) -> int | None:
    """``Retry-After`` is whole seconds, at least 1."""
    return None if retry_after is None else max(1, math.ceil(retry_after))


def json_answer(
    request: HttpRequest, status: int, code: str, message: str, retry_after: float | None = None
) -> HttpResponse:
    """``{"error": code, "message": message, "retry_after": seconds}``, whatever the client
    accepts (for APIs), with a ``Retry-After`` header where there is a retry time."""
    seconds = _retry_seconds(retry_after)
    body: dict[str, object] = {"error": code, "message": message}
    if seconds is not None:
        body["retry_after"] = seconds
    return _with_retry(JsonResponse(body, status=status), seconds)


def html_answer(
    request: HttpRequest, status: int, code: str, message: str, retry_after: float | None = None
) -> HttpResponse:
    """A small standalone HTML page saying the same."""
    seconds = _retry_seconds(retry_after)
    title = TITLES.get(code) or TITLES.get(status, "Error")
    retry = "" if seconds is None else f" Try again in {seconds} s."
    page = format_html(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>{}</title></head><body><h1>{}</h1><p>{}{}</p>"
        "<p><small>code: {}</small></p></body></html>",
        title,
        title,
        message,
        retry,
        code,
    )
    return _with_retry(HttpResponse(page, status=status), seconds)


def negotiated_answer(
    request: HttpRequest, status: int, code: str, message: str, retry_after: float | None = None
) -> HttpResponse:
    """The default: JSON for clients that accept JSON (``*/*`` included), else HTML."""
    preferred = request.get_preferred_type(["application/json", "text/html"])
    chosen = json_answer if preferred == "application/json" else html_answer
    return chosen(request, status, code, message, retry_after)


def _with_retry(response: HttpResponse, seconds: int | None) -> HttpResponse:
    """``response`` with a ``Retry-After`` header when there is a retry time."""
    if seconds is not None:
        response["Retry-After"] = str(seconds)
    return response


Failure = Refused | ExtractionError | UploadRejected
"""Everything the app answers in a view's place."""


def error_answer(
    request: HttpRequest, error: Failure, answer: Answer = negotiated_answer
) -> HttpResponse:
    """The answer to a refusal, an extraction error or a rejected upload: PoolBusy and
    PoolClosed 503, CallerBusy 429, ExtractionError 422, UploadRejected 400, 408, 411 or 413."""
    return answer(request, *_answered(error))


def _answered(error: Failure) -> tuple[int, str, str, float | None]:
    """What ``error`` is answered with: status, code, message, retry time."""
    if isinstance(error, ExtractionError):
        return 422, error.code, error.message, None
    if isinstance(error, UploadRejected):
        return error.status, error.code, str(error), None
    status = 429 if isinstance(error, CallerBusy) else 503
    # a deployment error's details (namespace, settings) are for the operators' log only
    message = MISCONFIGURED if isinstance(error, PoolMisconfigured) else str(error)
    return status, error.code, message, error.retry_after


AsgiAnswer = tuple[int, tuple[tuple[bytes, bytes], ...], bytes]
"""A complete answer as ASGI parts: status, headers (``Content-Length`` included), body."""


def prebuilt_answer(error: Failure, answer: Answer | None) -> AsgiAnswer | None:
    """The answer ``error_answer(request, error, answer)`` gives, as ASGI parts built once per
    distinct answer, when ``answer`` reads nothing of the request (``json_answer``,
    ``html_answer``); else None. For the door, which refuses hundreds of uploads a second
    with a handful of distinct answers (issue 24: building each cost the event loop)."""
    if answer is not json_answer and answer is not html_answer:
        return None
    status, code, message, retry_after = _answered(error)
    return _built(answer, status, code, message, _retry_seconds(retry_after))


@functools.lru_cache(maxsize=256)  # distinct answers: codes x messages x retry seconds
def _built(answer: Answer, status: int, code: str, message: str, seconds: int | None) -> AsgiAnswer:
    response = answer(cast(HttpRequest, None), status, code, message, seconds)  # not read
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
    if not response.has_header("Content-Length"):
        headers.append((b"Content-Length", str(len(response.content)).encode("latin-1")))
    return response.status_code, tuple(headers), response.content


def default_refusal_view(request: HttpRequest, exception: Failure) -> HttpResponse:
    """The default ``REFUSAL_VIEW``: JSON or HTML, as the client prefers."""
    return error_answer(request, exception)


def answers_quickly(answer: Answer | None) -> bool:
    """Whether ``refusal_answer(..., answer)`` runs only this module's own answers, quick
    and pure (no template, no database): safe to call on an event loop."""
    if answer is None:
        return get_settings().refusal_view is default_refusal_view
    return answer in (json_answer, html_answer, negotiated_answer)


async def arefusal_answer(
    request: HttpRequest, error: Failure, answer: Answer | None = None
) -> HttpResponse:
    """``refusal_answer`` from async code: a project's own answer runs in a worker thread,
    since it may render templates or read the database."""
    if answers_quickly(answer):
        return refusal_answer(request, error, answer)
    return await sync_to_async(refusal_answer, thread_sensitive=False)(request, error, answer)


def refusal_answer(
    request: HttpRequest, error: Failure, answer: Answer | None = None
) -> HttpResponse:
    """The answer in a view's place: ``answer`` (a decorator's ``answer=``) when given,
    else the project's ``REFUSAL_VIEW``."""
    if answer is not None:
        return error_answer(request, error, answer)
    response: HttpResponse = get_settings().refusal_view(request, error)
    return response
