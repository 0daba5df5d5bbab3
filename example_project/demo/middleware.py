"""Django's own middleware, without a thread hand-off per request under ASGI.

Django's ``MiddlewareMixin`` runs every ``process_request`` and ``process_response`` of an
async request through ``sync_to_async``: a hand-off to a thread and back, each waiting for
a CPU when the machine is busy (docs/performance.md). Each class here is Django's, with the
hooks that do no I/O run on the event loop; a hook that may touch the database (a session
to save, messages kept in the session, a form the CSRF check reads) still runs in a thread,
as Django runs it. Under WSGI they are Django's classes, unchanged.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest, HttpResponseBase
from django.middleware import clickjacking, common, csrf, security

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class OnTheLoop:
    """Mixin for a ``MiddlewareMixin`` subclass: its hooks run on the event loop unless
    ``in_thread`` says this request's hook may block."""

    get_response: Any

    def in_thread(self, request: HttpRequest, response: HttpResponseBase | None) -> bool:
        """Whether the hook (``process_response`` when ``response`` is given) may block."""
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = None
        if hook := getattr(self, "process_request", None):
            if self.in_thread(request, None):
                response = await sync_to_async(hook, thread_sensitive=True)(request)
            else:
                response = hook(request)
        response = response or await self.get_response(request)
        if hook := getattr(self, "process_response", None):
            if self.in_thread(request, response):
                response = await sync_to_async(hook, thread_sensitive=True)(request, response)
            else:
                response = hook(request, response)
        return response  # type: ignore[no-any-return]


class SecurityMiddleware(OnTheLoop, security.SecurityMiddleware):
    """Headers and the HTTPS redirect: no I/O."""


class SessionMiddleware(OnTheLoop, sessions.SessionMiddleware):
    """The session store is made lazily; it is saved (a query) only if the request changed
    it, or on every request with ``SESSION_SAVE_EVERY_REQUEST``."""

    def in_thread(self, request: HttpRequest, response: HttpResponseBase | None) -> bool:
        session = getattr(request, "session", None)
        saves = session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)
        return response is not None and saves


class CommonMiddleware(OnTheLoop, common.CommonMiddleware):
    """User agents, the slash and www redirects (URL resolution): no I/O."""


class CsrfViewMiddleware(OnTheLoop, csrf.CsrfViewMiddleware):
    """The token from the cookie on the loop; from the session, or from a form that must be
    parsed (an unsafe method to a view that is not exempt), in a thread."""

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        if self.async_mode:  # read by Django's handler when it loads the middleware
            self.process_view = self._process_view  # type: ignore[method-assign]

    def in_thread(self, request: HttpRequest, response: HttpResponseBase | None) -> bool:
        return bool(settings.CSRF_USE_SESSIONS)

    async def _process_view(
        self, request: HttpRequest, callback: Any, args: Any, kwargs: Any
    ) -> HttpResponseBase | None:
        check = csrf.CsrfViewMiddleware.process_view
        no_form = request.method in SAFE_METHODS or getattr(callback, "csrf_exempt", False)
        if no_form and not settings.CSRF_USE_SESSIONS:
            return check(self, request, callback, args, kwargs)
        return await sync_to_async(check, thread_sensitive=True)(
            self, request, callback, args, kwargs
        )


class AuthenticationMiddleware(OnTheLoop, auth.AuthenticationMiddleware):
    """``request.user`` and ``request.auser`` are lazy: no query until a view asks."""


class MessageMiddleware(OnTheLoop, messages.MessageMiddleware):
    """The storage is made lazily; it is written (maybe into the session) only if the
    request read or added messages."""

    def in_thread(self, request: HttpRequest, response: HttpResponseBase | None) -> bool:
        storage = getattr(request, "_messages", None)
        return response is not None and storage is not None and (storage.used or storage.added_new)


class XFrameOptionsMiddleware(OnTheLoop, clickjacking.XFrameOptionsMiddleware):
    """One header: no I/O."""
