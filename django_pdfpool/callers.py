"""Who is asking: functions from a request to a caller id, for one-job-per-caller.

The decorator resolves ``request.user`` (with ``auser()`` on async paths) before
calling these, so they only read attributes and must not query the database.
"""

from __future__ import annotations

import ipaddress

from django.http import HttpRequest

from .conf import get_settings


def _user_id(request: HttpRequest) -> str | None:
    """``user:<pk>`` for an authenticated user (the status page shows its username), else None."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None


def address_caller(address: str) -> str:
    """``ip:<address>`` for IPv4 (IPv4-mapped IPv6 folded to it), ``ip:<network>/<n>`` for
    IPv6 (its ``IPV6_PREFIX`` network: one host holds a whole /64); anything else as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"ip:{address}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"ip:{ip.ipv4_mapped}"
        network = ipaddress.IPv6Network((int(ip), get_settings().ipv6_prefix), strict=False)
        return f"ip:{network}"
    return f"ip:{ip}"


def user_or_ip(request: HttpRequest) -> str:
    """``user:<pk>`` for an authenticated user, else ``address_caller(REMOTE_ADDR)``.

    Forwarded headers are not trusted: behind a proxy every anonymous client
    would share the proxy's address. Use ``user_or_forwarded_ip`` there.
    """
    return _user_id(request) or address_caller(request.META.get("REMOTE_ADDR") or "unknown")


def user_or_forwarded_ip(request: HttpRequest) -> str:
    """Like ``user_or_ip``, but for anonymous users behind one trusted reverse proxy:
    the last address of ``X-Forwarded-For`` (the one your proxy appended)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    last = forwarded.rsplit(",", 1)[-1].strip()
    return _user_id(request) or address_caller(last or request.META.get("REMOTE_ADDR") or "unknown")
