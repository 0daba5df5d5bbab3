"""``AdmissionMiddleware``: refusals and extraction errors raised by views that call the pool
themselves get the decorator's 503/429/422 answers; other requests pass untouched."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from .exceptions import ExtractionError, Refused
from .responses import error_answer


class AdmissionMiddleware(MiddlewareMixin):
    """Turn ``Refused`` and ``ExtractionError`` escaping a view into answers (sync or async);
    only a ``process_exception`` hook, so it costs other requests nothing."""

    sync_capable = True
    async_capable = True

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """The answer for a refusal or an extraction error; None lets anything else through."""
        if isinstance(exception, Refused | ExtractionError):
            return error_answer(request, exception)
        return None
