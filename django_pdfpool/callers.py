"""Who is asking, for one job per caller: the ``CALLER`` functions (None when the door asks
before the body and they cannot know yet), and ``caller_of``, how every entry asks one."""

from __future__ import annotations

import functools
import ipaddress
from typing import Any, cast

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Model
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject, empty

from .conf import get_settings

ASKING = "django_pdfpool.door.asking"  # in ``request.META`` while the door asks, before the body
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix
IPV6_PREFIX = 64  # anonymous IPv6 callers: one caller per /64, the network one host holds


def cannot_know_yet(request: HttpRequest) -> bool:
    """The door asks, and the request carries credentials nobody has read yet: a session cookie
    or ``Authorization`` before Django's authentication, ``Authorization`` after it (DRF's)."""
    if ASKING not in request.META:
        return False
    if hasattr(request, "user"):
        return not request.user.is_authenticated and "HTTP_AUTHORIZATION" in request.META
    return "HTTP_AUTHORIZATION" in request.META or settings.SESSION_COOKIE_NAME in request.COOKIES


@functools.lru_cache(maxsize=4096)  # pure: a busy server sees the same addresses again
def address_caller(address: str, prefix: int = IPV6_PREFIX) -> str:
    """``ip:<address>`` for IPv4 (also carried in IPv6), ``ip:<network>/<prefix>`` for IPv6
    (one host holds a /64); brackets and a port stripped first; anything else as it is."""
    bare = address.strip()  # without brackets or a port: [2001:db8::1]:443, 2.2.2.2:80
    if bare.startswith("["):
        bare = bare[1:].split("]", 1)[0]
    elif bare.count(":") == 1:  # IPv4 and a port
        bare = bare.split(":", 1)[0]
    try:
        ip = ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        return f"ip:{address}"
    if isinstance(ip, ipaddress.IPv6Address):  # IPv4 in it: mapped, NAT64 or IPv4-compatible
        low = int(ip) & 0xFFFFFFFF
        if ip.ipv4_mapped is not None or ip in NAT64 or (int(ip) >> 32 == 0 and low > 1):
            return f"ip:{ipaddress.IPv4Address(low)}"
        return f"ip:{ipaddress.IPv6Network((int(ip), prefix), strict=False)}"
    return f"ip:{ip}"


@functools.lru_cache(maxsize=4096)
def network_of(caller: str) -> str:
    """The network an anonymous caller holds (``ip:a.b.c.0/24`` for ``ip:a.b.c.d``), else the
    caller: the door counts bodies per network, one for a host with many addresses."""
    try:
        ip = ipaddress.IPv4Address(caller.removeprefix("ip:")) if caller[:3] == "ip:" else None
    except ValueError:
        return caller
    return caller if ip is None else f"ip:{ipaddress.IPv4Network((int(ip), 24), strict=False)}"


def user_caller(user: Any) -> str:
    """``user:<pk>`` for the project's user model; a row of another model that says it is
    authenticated (a framework's API client) ``<app_label.model>:<pk>``: never a user's."""
    if not isinstance(user, Model) or isinstance(user, get_user_model()):
        return f"user:{user.pk}"
    return f"{user._meta.label_lower}:{user.pk}"


def _user_or(request: HttpRequest, address: str) -> str | None:
    if cannot_know_yet(request):
        return None
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.pk is not None:  # unsaved: no one
        return user_caller(user)
    return address_caller(address or request.META.get("REMOTE_ADDR") or "unknown")


def user_or_ip(request: HttpRequest) -> str | None:
    """``user_caller`` of an authenticated user with a primary key, else
    ``address_caller(REMOTE_ADDR)`` (not a forwarded address: ``user_or_forwarded_ip``); None
    when ``cannot_know_yet``."""
    return _user_or(request, "")


def user_or_forwarded_ip(request: HttpRequest) -> str | None:
    """Like ``user_or_ip``, but for anonymous users behind one trusted reverse proxy:
    the last address of ``X-Forwarded-For`` (the one your proxy appended)."""
    return _user_or(request, request.META.get("HTTP_X_FORWARDED_FOR", "").rsplit(",")[-1].strip())


def caller_of(request: HttpRequest) -> str:
    """The caller the ``CALLER`` setting names for ``request`` (``user:<pk>``, ``ip:...`` by
    default), from synchronous code (an async ``CALLER`` run to completion here)."""
    function = get_settings().caller
    call = async_to_sync(function) if iscoroutinefunction(function) else function
    return _named(call(request), request)


async def aresolve_user(request: HttpRequest) -> None:
    """A lazy ``request.user`` resolved (``auser()``), once, not on the loop later; one read
    already (the door's, under WSGI) and a user a later middleware set stay
    (RemoteUserMiddleware's ``auser()`` still says anonymous)."""
    user = getattr(request, "user", None)
    unread = isinstance(user, SimpleLazyObject) and user._wrapped is empty
    if hasattr(request, "auser") and (user is None or unread):
        request.user = await request.auser()


def _signed_in(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return user is not None and user.is_authenticated


def caller_after(request: HttpRequest, asked_before: str | None) -> str:
    """The caller once authentication has run: ``asked_before`` (the door's, asked maybe
    before it) unless a user is signed in now, else ``caller_of``."""
    if asked_before is not None and not _signed_in(request):
        return asked_before
    return caller_of(request)


async def acaller_after(request: HttpRequest, asked_before: str | None) -> str:
    """``caller_after`` from an event loop (``request.user`` resolved first)."""
    await aresolve_user(request)
    if asked_before is not None and not _signed_in(request):
        return asked_before
    return await acaller_of(request)


async def acaller_of(request: HttpRequest) -> str:
    """``caller_of`` from an event loop (``request.user`` resolved first); a project's sync
    ``CALLER`` on the request's thread, where Django closes its connections."""
    await aresolve_user(request)
    function = get_settings().caller
    if function in (user_or_ip, user_or_forwarded_ip):  # read attributes only: fine on a loop
        return _named(function(request), request)
    if iscoroutinefunction(function):
        return _named(await function(request), request)
    return _named(await sync_to_async(function, thread_sensitive=True)(request), request)


def _named(caller: object, request: HttpRequest) -> str:
    """``caller``, a non-empty string (None only while the door asks): else every caller
    without one would count as one."""
    if (caller is None and ASKING in request.META) or (isinstance(caller, str) and caller):
        return cast(str, caller)
    raise TypeError(
        f"PDFPOOL['CALLER'] must return a non-empty string for a request whose body is in "
        f"(None only before it, to the door), not {caller!r}."
    )
