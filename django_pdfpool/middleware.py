"""``AdmissionMiddleware``: the door under WSGI (an upload to a ``@pdf_pooled`` view is
refused from its headers, before its body is read, when the pool cannot take it), and the
answers to refusals and extraction errors raised by views that call the pool themselves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from .door.django import aenter, enter
from .door.rules import Ticket
from .exceptions import ExtractionError, Refused
from .responses import refusal_answer

GetResponse = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]


class AdmissionMiddleware:
    """Sync and async: put it above ``CsrfViewMiddleware`` and any middleware that reads
    ``request.POST``, so that the door decides before the body is read. Requests to other
    views pass with one URL resolution (see docs/door.md for its cost)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.async_mode:
            return self.__acall__(request)
        entry = enter(request)
        if isinstance(entry, HttpResponse):
            return entry
        try:
            return cast(HttpResponse, self.get_response(request))
        finally:
            if isinstance(entry, Ticket):
                entry.release()

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        entry = await aenter(request)
        if isinstance(entry, HttpResponse):
            return entry
        try:
            return await cast(Awaitable[HttpResponse], self.get_response(request))
        finally:
            if isinstance(entry, Ticket):
                entry.release()

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """The answer for a refusal or an extraction error; None lets anything else through."""
        if isinstance(exception, Refused | ExtractionError):
            return refusal_answer(request, exception)
        return None
