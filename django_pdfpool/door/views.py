"""Which requests the door looks at: a POST whose URL Django's own resolver maps to a
``@pdf_pooled`` view (no second list of URLs to keep in sync)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from django.urls import Resolver404, resolve

from ..responses import Answer

POOLED = "pdfpool_admission"
"""The attribute ``@pdf_pooled`` sets on the view it returns: what the door needs of it."""


class PooledView(Protocol):
    """What the door asks of a pooled view: the single-flight key of an upload, and the
    view's own ``answer=``, if it has one (else ``REFUSAL_VIEW`` answers)."""

    answer: Answer | None

    def key(self, sha256: str) -> str: ...


def pooled_view(path_info: str, urlconf: str | None = None) -> PooledView | None:
    """The pooled view ``path_info`` resolves to, or None (not found, or not pooled)."""
    try:
        match = resolve(path_info, urlconf)
    except Resolver404:
        return None
    return pooled_view_of(match.func)


def pooled_view_of(func: Callable[..., Any]) -> PooledView | None:
    """``func``'s pooled view: set on a decorated function, or on the ``post`` method of a
    class-based view (``method_decorator(pdf_pooled, name="post")`` copies it there)."""
    found = getattr(func, POOLED, None)
    if found is None:
        view_class = getattr(func, "view_class", None)
        found = getattr(getattr(view_class, "post", None), POOLED, None)
    return found
