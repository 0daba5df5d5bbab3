"""``AdmissionMiddleware``: the door under WSGI (an upload to a ``@pdf_pooled`` view is
refused from its headers, before its body is read, when the pool cannot take it), and the
answers to refusals and extraction errors raised by views that call the pool themselves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from .door.django import entering
from .door.rules import Ticket
from .door.steps import Call, Steps, arun_steps, run_steps
from .exceptions import ExtractionError, Refused
from .responses import refusal_answer

GetResponse = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]
Sync = Callable[[], HttpResponse]  # get_response, as a sync chain calls it
Async = Callable[[], Awaitable[HttpResponse]]  # and an async one


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
        return run_steps(self._through(request))

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        return await arun_steps(self._through(request))

    def _through(self, request: HttpRequest) -> Steps[HttpResponse]:
        """The door, then the view, sync or async: a refusal's answer, or the view's
        response with the door's place given back (its call counts in the pool by then)."""
        entry = yield from entering(request)
        if isinstance(entry, HttpResponse):
            return entry
        respond = partial(self.get_response, request)
        try:
            response: HttpResponse = yield Call(cast(Sync, respond), cast(Async, respond))
            return response
        finally:
            if isinstance(entry, Ticket):
                entry.release()

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """The answer for a refusal or an extraction error; None lets anything else through."""
        if isinstance(exception, Refused | ExtractionError):
            return refusal_answer(request, exception)
        return None
