"""Who is asking: functions from a request to a caller id, for one-job-per-caller.

The decorator resolves ``request.user`` (with ``auser()`` on async paths) before
calling these, so they only read attributes and must not query the database.
"""

from __future__ import annotations

from django.http import HttpRequest


def _user_id(request: HttpRequest) -> str | None:
    """``user:<pk>`` for an authenticated user (the status page shows its username), else None."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None


def user_or_ip(request: HttpRequest) -> str:
    """``user:<pk>`` for an authenticated user, else ``ip:<REMOTE_ADDR>``.

    Forwarded headers are not trusted: behind a proxy every anonymous client
    would share the proxy's address. Use ``user_or_forwarded_ip`` there.
    """
    return _user_id(request) or f"ip:{request.META.get('REMOTE_ADDR', 'unknown')}"


def user_or_forwarded_ip(request: HttpRequest) -> str:
    """Like ``user_or_ip``, but for anonymous users behind one trusted reverse proxy:
    the last address of ``X-Forwarded-For`` (the one your proxy appended)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    last = forwarded.rsplit(",", 1)[-1].strip()
    return _user_id(request) or f"ip:{last or request.META.get('REMOTE_ADDR', 'unknown')}"
