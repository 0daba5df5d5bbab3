"""The pool's Prometheus metrics, defined once (name, type, help, label, how each is read),
and ``metrics_view``, which serves them with no client library and no login; ``collector``
serves the same through prometheus_client (docs/metrics.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..admission.ledger import REFUSALS, CountedBy, Counter, PoolSnapshot
from ..admission.protocol import AdmissionPool
from ..conf import get_settings
from ..configured import get_pool
from ..door import ARRIVING, terms

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PID_LABEL = "pid"  # prometheus_client's multiprocess mode adds it to every gauge itself
EVENTS = tuple(counter for counter in Counter if counter.reason is None)  # {event="started"}
MetricSample = tuple[str, float]  # its label's value ("" for a metric without one), its value


@dataclass(frozen=True)
class Reading:
    """What the metrics are read from: a snapshot of a process's pool, the job timeout, the
    process's id, and its door: the kind of each body arriving, what it shed or timed out."""

    snapshot: PoolSnapshot
    timeout: float
    pid: int
    arriving: tuple[str, ...]  # "place" or "budget"
    shed: int
    timed_out: int
    counted: frozenset[Counter] = frozenset(Counter)  # the counters its scope counts

    @classmethod
    def now(
        cls, snapshot: PoolSnapshot, timeout: float, pid: int, counted: Iterable[Counter] = Counter
    ) -> Reading:
        """With this process's door as it is now."""
        arriving = tuple(entry.kind for entry in ARRIVING.held(terms()))
        door = (arriving, ARRIVING.shed, ARRIVING.timed_out)
        return cls(snapshot, timeout, pid, *door, frozenset(counted))

    @classmethod
    def of(cls, pool: AdmissionPool, timeout: float, pid: int) -> Reading:
        """``pool`` as one process's scrape reports it: a Redis pool's cluster, with only the
        counters Redis counts, and none while Redis is out (this process's books in their
        place would read as a counter reset, and their return as a spike)."""
        cluster = pool.cluster_snapshot()
        if cluster is None:
            return cls.now(pool.snapshot(), timeout, pid)
        snapshot = cluster.cluster
        redis = [c for c in Counter if c.counted_by is not CountedBy.PROCESS]
        return cls.now(snapshot, timeout, pid, redis if snapshot.scope == "cluster" else ())


@dataclass(frozen=True)
class MetricDefinition:
    """One metric: ``name`` as exposed (a counter's ends in ``_total``), ``help``, ``read``
    (its value in one reading, or with a ``label`` its samples), ``kind``, and ``of_pool``:
    read from the pool (a new pool's counters start from zero), not the process's door."""

    name: str
    help: str
    read: Callable[[Reading], float | list[MetricSample]]
    kind: Literal["gauge", "counter"] = "gauge"
    label: str | None = None
    of_pool: bool = True

    def samples(self, reading: Reading) -> list[MetricSample]:
        value = self.read(reading)
        return value if isinstance(value, list) else [("", float(value))]


def _stats(name: str, help_: str, field: str) -> MetricDefinition:
    """The mean, p95 and max of one of the snapshot's duration summaries, labelled ``stat``."""

    def read(r: Reading) -> list[MetricSample]:
        summary = getattr(r.snapshot, field)
        return [(stat, float(getattr(summary, stat))) for stat in ("mean", "p95", "max")]

    return MetricDefinition(name, help_, read, label="stat")


METRICS: tuple[MetricDefinition, ...] = (
    MetricDefinition(
        "pdfpool_process_info",
        "The process that answered.",
        lambda r: [(str(r.pid), 1.0)],
        label=PID_LABEL,
    ),
    MetricDefinition("pdfpool_slots", "Jobs that may run at once.", lambda r: r.snapshot.slots),
    MetricDefinition(
        "pdfpool_queue_size", "Jobs that may wait for a slot.", lambda r: r.snapshot.queue
    ),
    MetricDefinition(
        "pdfpool_wait_seconds",
        "Longest wait for a slot (-1: none).",
        lambda r: -1.0 if r.snapshot.wait is None else r.snapshot.wait,
    ),
    MetricDefinition("pdfpool_timeout_seconds", "Longest run of one job.", lambda r: r.timeout),
    MetricDefinition("pdfpool_running", "Jobs holding a slot.", lambda r: r.snapshot.running),
    MetricDefinition("pdfpool_queued", "Jobs waiting for a slot.", lambda r: r.snapshot.queued),
    MetricDefinition("pdfpool_closed", "1 while draining or stopped.", lambda r: r.snapshot.closed),
    MetricDefinition(
        "pdfpool_jobs_total",
        "Job events since the pool was built.",
        lambda r: [(str(e), float(r.snapshot.counters[e])) for e in EVENTS if e in r.counted],
        "counter",
        "event",
    ),
    MetricDefinition(
        "pdfpool_refused_total",
        "Refused callers since the pool was built, by reason.",
        lambda r: [
            (str(c.reason), float(r.snapshot.counters[c])) for c in REFUSALS if c in r.counted
        ],
        "counter",
        "reason",
    ),
    _stats(
        "pdfpool_queue_wait_seconds",
        "Queue wait of recent jobs: started, or refused after waiting the longest wait.",
        "queue_wait",
    ),
    _stats("pdfpool_run_seconds", "Run time of recently finished jobs.", "run_time"),
    MetricDefinition(
        "pdfpool_door_held",
        "Bodies the door let in that are still arriving, on a place or the budget.",
        lambda r: [(kind, float(r.arriving.count(kind))) for kind in ("place", "budget")],
        label="kind",
        of_pool=False,
    ),
    MetricDefinition(
        "pdfpool_door_shed_total",
        "Uploads the door refused from the headers past its budget (they might have joined).",
        lambda r: r.shed,
        "counter",
        of_pool=False,
    ),
    MetricDefinition(
        "pdfpool_door_timed_out_total",
        "Bodies let in that missed their deadline (408; their place given back).",
        lambda r: r.timed_out,
        "counter",
        of_pool=False,
    ),
)
"""Every metric, in the order they are exposed."""


def own_snapshot(pool: AdmissionPool) -> PoolSnapshot:
    """This process's part of ``pool`` (a Redis pool's ``snapshot()`` is the cluster's), read
    from its memory: a Redis pool's ``local_snapshot()``, as in its ``cluster_snapshot()``."""
    return getattr(pool, "local_snapshot", pool.snapshot)()


def render(reading: Reading) -> str:
    """The text exposition format (0.0.4) of one reading."""
    lines: list[str] = []
    for metric in METRICS:
        lines += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {metric.kind}"]
        for label, value in metric.samples(reading):
            labels = f'{{{metric.label}="{label}"}}' if metric.label else ""
            number = str(int(value)) if value.is_integer() else repr(value)  # no digit lost
            lines.append(f"{metric.name}{labels} {number}")
    return "\n".join(lines) + "\n"


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """This process's pool for Prometheus: ``path("...", metrics_view)`` where only your
    scraper can reach it."""
    text = render(Reading.of(get_pool(), get_settings().timeout, os.getpid()))
    return HttpResponse(text, content_type=CONTENT_TYPE)
