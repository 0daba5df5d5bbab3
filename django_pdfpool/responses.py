"""Answers a client can act on: refusals and extraction errors as JSON or HTML.

Shared by the decorator and the middleware. Only codes and the messages meant for
users reach the client: never a traceback or an internal path.
"""

from __future__ import annotations

import math

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.html import format_html

from .extraction import ExtractionError
from .pool import CallerBusy, Refused

TITLES = {
    400: "No PDF received",
    413: "PDF too large",
    422: "This PDF cannot be read",
    429: "You already have a PDF in progress",
    503: "Busy: please try again shortly",
}


def answer(
    request: HttpRequest,
    status: int,
    code: str,
    message: str,
    retry_after: float | None = None,
) -> HttpResponse:
    """A JSON answer for clients that accept JSON, else a small HTML page."""
    seconds = None if retry_after is None else max(1, math.ceil(retry_after))
    if request.get_preferred_type(["application/json", "text/html"]) == "application/json":
        body = {"error": code, "message": message}
        if seconds is not None:
            body["retry_after"] = seconds
        response: HttpResponse = JsonResponse(body, status=status)
    else:
        retry = "" if seconds is None else f" Try again in {seconds} s."
        response = HttpResponse(
            format_html(
                '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                "<title>{}</title></head><body><h1>{}</h1><p>{}{}</p>"
                "<p><small>code: {}</small></p></body></html>",
                TITLES.get(status, "Error"),
                TITLES.get(status, "Error"),
                message,
                retry,
                code,
            ),
            status=status,
        )
    if seconds is not None:
        response["Retry-After"] = str(seconds)
    return response


def refusal_answer(request: HttpRequest, error: Refused | ExtractionError) -> HttpResponse:
    """PoolBusy and PoolClosed: 503; CallerBusy: 429; extraction errors: 422."""
    if isinstance(error, ExtractionError):
        return answer(request, 422, error.code, error.message)
    status = 429 if isinstance(error, CallerBusy) else 503
    return answer(request, status, error.code, str(error), error.retry_after)
