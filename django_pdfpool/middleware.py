"""Admission middleware: refusals raised by views that call the pool directly
become the same 503/429/422 answers the decorator gives. It only has a
``process_exception`` hook, so other requests pass untouched (sync or async)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from .exceptions import ExtractionError, Refused
from .responses import refusal_answer


class AdmissionMiddleware(MiddlewareMixin):
    """Turn ``Refused`` and ``ExtractionError`` escaping a view into answers."""

    sync_capable = True
    async_capable = True

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Refused | ExtractionError):
            return refusal_answer(request, exception)
        return None
