"""An optional Prometheus endpoint, off unless routed: this process's pool in the text
exposition format, with no client library and no login. The metrics are those of
``definitions``, which the prometheus_client collector serves too (docs/metrics.md)."""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..admission.ledger import PoolSnapshot
from ..conf import get_settings
from ..configured import get_pool
from .definitions import METRICS, DoorFigures, Reading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(snapshot: PoolSnapshot, *, timeout: float, pid: int) -> str:
    """The exposition text for one snapshot (names are stable; see the docs)."""
    reading = Reading(snapshot, timeout, pid, DoorFigures.now())
    lines: list[str] = []
    for metric in METRICS:
        lines.append(f"# HELP {metric.name} {metric.help}")
        lines.append(f"# TYPE {metric.name} {metric.kind}")
        for label, value in metric.read(reading):
            labels = f'{{{metric.label}="{label}"}}' if metric.label else ""
            lines.append(f"{metric.name}{labels} {_number(value)}")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    """A whole number without ".0"; any other in full (``repr``: no digit lost)."""
    return str(int(value)) if value.is_integer() else repr(value)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """This process's pool for Prometheus: ``path("...", metrics_view)`` where only your
    scraper can reach it."""
    text = render(get_pool().snapshot(), timeout=get_settings().timeout, pid=os.getpid())
    return HttpResponse(text, content_type=CONTENT_TYPE)
