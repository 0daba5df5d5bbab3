"""Which requests the door looks at: a POST whose URL Django's own resolver maps to a
``@pdf_pooled`` view (no second list of URLs to keep in sync)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

from django.http import HttpRequest
from django.urls import ResolverMatch, URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404

from ..responses import RefusalView

POOLED = "pdfpool_admission"
"""The attribute ``@pdf_pooled`` sets on the view it returns: what the door needs of it."""


class PooledView(Protocol):
    """What the door asks of a pooled view: the single-flight key of an upload, and the
    view's own ``answer=``, if it has one (else ``REFUSAL_VIEW`` answers)."""

    answer: RefusalView | None

    def key(self, sha256: str) -> str: ...


def pooled_view(path_info: str, urlconf: str | None = None) -> PooledView | None:
    """The pooled view ``path_info`` resolves to, or None (not found, or not pooled)."""
    try:
        match = resolve(path_info, urlconf)
    except Resolver404:
        return None
    return pooled_view_of(match.func)


def route_of(request: HttpRequest) -> ResolverMatch | None:
    """The route ``request`` resolves to, for an answer that reads its view (DRF's, ninja's):
    ``request.resolver_match`` where it is set already, else resolved here; None if none."""
    match: ResolverMatch | None = getattr(request, "resolver_match", None)
    if match is not None:
        return match
    try:
        return resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return None


def pooled_view_of(func: Callable[..., Any]) -> PooledView | None:
    """``func``'s pooled view, wherever a framework keeps it: on the function itself; on
    the POST handler of its class (a Django class-based view or DRF ``APIView``, where
    ``method_decorator`` or ``@pdf_pooled`` put it; a DRF ViewSet's action for POST); in
    the handler's closure (DRF's ``@api_view``); or among the operations the view serves
    (django-ninja's path views). The door imports no framework: it reads what they keep."""
    found = getattr(func, POOLED, None)
    if found is not None:
        return cast(PooledView, found)
    view_class = getattr(func, "view_class", None) or getattr(func, "cls", None)
    if view_class is not None:
        actions = getattr(func, "actions", None)  # a DRF ViewSet's {"post": "create"}
        name = actions.get("post") if isinstance(actions, dict) else "post"
        handler = getattr(view_class, name, None) if isinstance(name, str) else None
        if handler is None:
            return None
        return getattr(handler, POOLED, None) or _closed_over(handler)
    return _closed_over(func)


def _closed_over(func: Callable[..., Any]) -> PooledView | None:
    """A pooled view ``func`` closes over: the function DRF's ``@api_view`` handler calls,
    or the POST operation of the django-ninja path view whose wrapper ``func`` is."""
    for cell in getattr(func, "__closure__", None) or ():
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        found = getattr(held, POOLED, None) if callable(held) else None
        if found is not None:
            return cast(PooledView, found)
        operations = getattr(held, "operations", None)
        if isinstance(operations, list):
            for operation in operations:
                if "POST" in getattr(operation, "methods", ()):
                    found = getattr(getattr(operation, "view_func", None), POOLED, None)
                    if found is not None:
                        return cast(PooledView, found)
    return None


def pooled_routes(urlconf: str | None = None) -> Iterator[tuple[str, Any, PooledView]]:
    """Every route of the URLconf whose view is pooled: its pattern, view and pooled view."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, Any, PooledView]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                found = pooled_view_of(pattern.callback)
                if found is not None:
                    yield prefix + str(pattern.pattern), pattern.callback, found

    yield from walk(get_resolver(urlconf).url_patterns, "/")


def framework_mismatches(urlconf: str | None = None) -> list[tuple[str, str]]:
    """Routes of DRF or django-ninja pooled by ``django_pdfpool.pdf_pooled`` instead of
    the framework's integration, with the integration to use (for ``manage.py check``):
    such a route works, but answers refusals itself, not through the framework's handlers
    (and names ninja's callers by ``request.user``, not ``request.auth``)."""
    found = []
    for route, view, pooled in pooled_routes(urlconf):
        framework = _framework(view)
        integration = f"django_pdfpool.contrib.{framework}"
        if framework is not None and getattr(pooled.answer, "__module__", "") != integration:
            found.append((route, integration))
    return found


def _framework(view: Any) -> str | None:
    """``"drf"`` or ``"ninja"`` for a view either framework made (read, not imported)."""
    if hasattr(getattr(view, "cls", None), "authentication_classes"):
        return "drf"
    for cell in getattr(view, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            if type(cell.cell_contents).__module__.startswith("ninja."):
                return "ninja"
    return None
