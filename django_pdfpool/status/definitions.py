"""The pool's Prometheus metrics, defined once: name, type, help text, label and how each is
read from a snapshot. The dependency-free endpoint (``metrics``) and the prometheus_client
collector (``collector``) both render this list (docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..admission.ledger import REFUSALS, Counter, DurationSummary, PoolSnapshot
from ..door import ARRIVING, terms

__all__ = ["METRICS", "PID_LABEL", "DoorFigures", "MetricDefinition", "MetricSample", "Reading"]

#: The label naming a process. prometheus_client's multiprocess mode adds it to every gauge
#: itself, so a metric labelled by it alone has no label of its own there.
PID_LABEL = "pid"

MetricSample = tuple[str, float]
"""One sample of a metric: its label's value ("" for a metric without a label) and value."""


@dataclass(frozen=True)
class DoorFigures:
    """This process's door: bodies arriving on a place or the budget, what it shed past
    the budget and what timed out (docs/door.md)."""

    places: int = 0
    budget: int = 0
    shed: int = 0
    timed_out: int = 0

    @classmethod
    def now(cls) -> DoorFigures:
        held = [entry.kind for entry in ARRIVING.held(terms())]
        places, budget = held.count("place"), held.count("budget")
        return cls(places, budget, ARRIVING.shed, ARRIVING.timed_out)


@dataclass(frozen=True)
class Reading:
    """What the metrics are read from: one snapshot of a process's pool, the job timeout
    (``PDFPOOL["TIMEOUT"]``), the process's id and its door's figures."""

    snapshot: PoolSnapshot
    timeout: float
    pid: int
    door: DoorFigures = DoorFigures()


@dataclass(frozen=True)
class MetricDefinition:
    """One metric: ``name`` as exposed (a counter's ends in ``_total``), ``kind``, ``help``,
    at most one ``label``, and ``read``, its samples in one reading."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    label: str | None
    read: Callable[[Reading], list[MetricSample]]


EVENTS = tuple(counter for counter in Counter if counter.reason is None)  # {event="started"}
STATS = ("mean", "p95", "max")


def _gauge(name: str, help_: str, value: Callable[[Reading], float]) -> MetricDefinition:
    return MetricDefinition(name, "gauge", help_, None, lambda r: [("", float(value(r)))])


def _stats(
    name: str, help_: str, summary: Callable[[PoolSnapshot], DurationSummary]
) -> MetricDefinition:
    def read(r: Reading) -> list[MetricSample]:
        return [(stat, float(getattr(summary(r.snapshot), stat))) for stat in STATS]

    return MetricDefinition(name, "gauge", help_, "stat", read)


def _wait(snapshot: PoolSnapshot) -> float:
    return -1.0 if snapshot.wait is None else snapshot.wait


METRICS: tuple[MetricDefinition, ...] = (
    MetricDefinition(
        "pdfpool_process_info",
        "gauge",
        "The process that answered.",
        PID_LABEL,
        lambda r: [(str(r.pid), 1.0)],
    ),
    _gauge("pdfpool_slots", "Jobs that may run at once.", lambda r: r.snapshot.slots),
    _gauge("pdfpool_queue_size", "Jobs that may wait for a slot.", lambda r: r.snapshot.queue),
    _gauge(
        "pdfpool_wait_seconds", "Longest wait for a slot (-1: none).", lambda r: _wait(r.snapshot)
    ),
    _gauge("pdfpool_timeout_seconds", "Longest run of one job.", lambda r: r.timeout),
    _gauge("pdfpool_running", "Jobs holding a slot.", lambda r: r.snapshot.running),
    _gauge("pdfpool_queued", "Jobs waiting for a slot.", lambda r: r.snapshot.queued),
    _gauge("pdfpool_closed", "1 while draining or stopped.", lambda r: r.snapshot.closed),
    MetricDefinition(
        "pdfpool_jobs_total",
        "counter",
        "Job events since the pool was built.",
        "event",
        lambda r: [(str(e), float(r.snapshot.counters[e])) for e in EVENTS],
    ),
    MetricDefinition(
        "pdfpool_refused_total",
        "counter",
        "Refused callers since the pool was built, by reason.",
        "reason",
        lambda r: [(str(c.reason), float(r.snapshot.counters[c])) for c in REFUSALS],
    ),
    _stats(
        "pdfpool_queue_wait_seconds",
        "Queue wait of recently started jobs.",
        lambda s: s.queue_wait,
    ),
    _stats("pdfpool_run_seconds", "Run time of recently finished jobs.", lambda s: s.run_time),
    MetricDefinition(
        "pdfpool_door_held",
        "gauge",
        "Bodies the door let in that are still arriving, on a place or the budget.",
        "kind",
        lambda r: [("place", float(r.door.places)), ("budget", float(r.door.budget))],
    ),
    MetricDefinition(
        "pdfpool_door_shed_total",
        "counter",
        "Uploads the door refused from the headers past its budget (they might have joined).",
        None,
        lambda r: [("", float(r.door.shed))],
    ),
    MetricDefinition(
        "pdfpool_door_timed_out_total",
        "counter",
        "Bodies let in that missed their deadline (408; their place given back).",
        None,
        lambda r: [("", float(r.door.timed_out))],
    ),
)
"""Every metric, in the order they are exposed."""
