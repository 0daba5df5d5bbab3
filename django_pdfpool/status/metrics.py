"""An optional Prometheus endpoint, off unless routed: this process's pool in the text
exposition format, with no client library and no login (docs/status.md)."""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..admission.snapshot import PoolSnapshot
from ..conf import get_settings
from ..process_pool import get_pool

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_EVENTS = ("started", "joined", "completed", "failed", "cancelled", "abandoned")
_REFUSALS = {"busy": "refused_busy", "caller_busy": "refused_caller", "closed": "refused_closed"}


def render(snapshot: PoolSnapshot, *, timeout: float, pid: int) -> str:
    """The exposition text for one snapshot (names are stable; see the docs)."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    wait = -1.0 if snapshot.wait is None else snapshot.wait
    counters = snapshot.counters
    metric("pdfpool_process_info", "gauge", "The process that answered.", [(f'{{pid="{pid}"}}', 1)])
    metric("pdfpool_slots", "gauge", "Jobs that may run at once.", [("", snapshot.slots)])
    metric("pdfpool_queue_size", "gauge", "Jobs that may wait for a slot.", [("", snapshot.queue)])
    metric("pdfpool_wait_seconds", "gauge", "Longest wait for a slot (-1: none).", [("", wait)])
    metric("pdfpool_timeout_seconds", "gauge", "Longest run of one job.", [("", timeout)])
    metric("pdfpool_running", "gauge", "Jobs holding a slot.", [("", snapshot.running)])
    metric("pdfpool_queued", "gauge", "Jobs waiting for a slot.", [("", snapshot.queued)])
    metric("pdfpool_closed", "gauge", "1 while draining or stopped.", [("", int(snapshot.closed))])
    metric(
        "pdfpool_jobs_total",
        "counter",
        "Job events since the pool was built.",
        [(f'{{event="{event}"}}', getattr(counters, event)) for event in _EVENTS],
    )
    metric(
        "pdfpool_refused_total",
        "counter",
        "Refused callers since the pool was built, by reason.",
        [(f'{{reason="{code}"}}', getattr(counters, f)) for code, f in _REFUSALS.items()],
    )
    for name, summary, what in (
        ("pdfpool_queue_wait_seconds", snapshot.queue_wait, "Queue wait of recently started jobs."),
        ("pdfpool_run_seconds", snapshot.run_time, "Run time of recently finished jobs."),
    ):
        stats = [(f'{{stat="{s}"}}', getattr(summary, s)) for s in ("mean", "p95", "max")]
        metric(name, "gauge", what, stats)
    return "\n".join(lines) + "\n"


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """This process's pool for Prometheus: ``path("...", metrics_view)`` where only your
    scraper can reach it."""
    text = render(get_pool().snapshot(), timeout=get_settings().timeout, pid=os.getpid())
    return HttpResponse(text, content_type=CONTENT_TYPE)
