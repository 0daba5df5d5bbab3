"""The pool's metrics through prometheus_client (the ``[prometheus]`` extra), in both of its
modes: ``PoolCollector`` reads the pool at each scrape of one process's registry;
``ProcessExporter`` copies it, every second, into the mmap-backed metrics of multiprocess
mode (``PROMETHEUS_MULTIPROC_DIR``), which any worker's ``MultiProcessCollector`` reads.
``register_metrics`` picks the mode. The metrics are ``definitions.METRICS`` (docs/metrics.md).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.multiprocess import mark_process_dead
except ImportError as error:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "django-pdfpool's Prometheus metrics need prometheus_client: "
        "pip install 'django-pdfpool[prometheus]'"
    ) from error

from ..admission.protocol import AdmissionPool
from ..conf import get_settings
from ..configured import get_pool, peek_pool
from .definitions import METRICS, PID_LABEL, DoorFigures, MetricDefinition, Reading

__all__ = ["PoolCollector", "ProcessExporter", "multiprocess_mode", "register_metrics"]

logger = logging.getLogger("django_pdfpool.metrics")

PoolSource = Callable[[], AdmissionPool | None]
"""Where a collector finds the pool: ``get_pool``, ``peek_pool``, or your own."""


def multiprocess_mode() -> bool:
    """Whether prometheus_client runs in multiprocess mode (its own test, on the same
    environment variables)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ


def _timeout() -> float:
    return get_settings().timeout


def _read(pool: AdmissionPool, timeout: Callable[[], float]) -> Reading:
    return Reading(pool.snapshot(), timeout(), os.getpid(), DoorFigures.now())


def _read_own(pool: AdmissionPool, timeout: Callable[[], float]) -> Reading:
    """This process's figures only, even from a Redis pool (whose ``snapshot()`` is the
    cluster's): multiprocess mode sums the processes' counters itself."""
    cluster = pool.cluster_snapshot()
    snapshot = pool.snapshot() if cluster is None else cluster.local
    return Reading(snapshot, timeout(), os.getpid(), DoorFigures.now())


class PoolCollector:
    """A collector for one process's registry: the pool read at each scrape.

    ``pool`` defaults to ``get_pool`` (a scrape answers for the process's pool, building it
    from the settings, as the dependency-free endpoint does)."""

    def __init__(self, pool: PoolSource = get_pool, timeout: Callable[[], float] = _timeout):
        self._pool, self._timeout = pool, timeout

    def describe(self) -> list[Metric]:
        """The metrics without samples, so that registering reads no pool."""
        return [_family(metric, None) for metric in METRICS]

    def collect(self) -> Iterator[Metric]:
        """Every metric, from one snapshot; nothing while there is no pool."""
        pool = self._pool()
        if pool is None:
            return
        reading = _read(pool, self._timeout)
        for metric in METRICS:
            yield _family(metric, reading)


def _family(metric: MetricDefinition, reading: Reading | None) -> Metric:
    labels = [metric.label] if metric.label else []
    family: GaugeMetricFamily | CounterMetricFamily
    if metric.kind == "counter":
        family = CounterMetricFamily(metric.name, metric.help, labels=labels)
    else:
        family = GaugeMetricFamily(metric.name, metric.help, labels=labels)
    for label, value in metric.read(reading) if reading else ():
        family.add_metric([label] if metric.label else [], value)
    return family


def _own_labels(metric: MetricDefinition) -> list[str]:
    """A metric's labels in multiprocess mode, where prometheus_client adds ``pid``."""
    return [metric.label] if metric.label and metric.label != PID_LABEL else []


class ProcessExporter:
    """prometheus_client's multiprocess mode: this process's pool copied into real gauges
    (``liveall``: one series per live process, labelled ``pid``) and counters (summed over
    every process that ever ran), from this process's own figures (``ClusterSnapshot.local``
    for a Redis pool), every ``interval`` seconds, by a daemon thread that a
    forked child starts afresh. At exit the counters are brought up to date and this
    process's gauges are removed.

    ``pool`` defaults to ``peek_pool``: a process appears once its pool is built, and a
    server's master process (``--preload``) never builds one for the exporter's sake."""

    def __init__(
        self,
        pool: PoolSource = peek_pool,
        timeout: Callable[[], float] = _timeout,
        *,
        interval: float = 1.0,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, not {interval!r}")
        self._pool, self._timeout, self.interval = pool, timeout, interval
        # Made at the first refresh with a pool: an unlabelled metric writes its zero to
        # this process's file as soon as it exists, and a process without a pool has none.
        self._metrics: dict[str, Gauge | Counter] = {}
        self._lock = threading.Lock()  # guards the fields below
        self._counted: dict[tuple[str, str], float] = {}  # counter values already added
        self._counted_for: weakref.ref[AdmissionPool] | None = None  # the pool they are of
        self._stop: threading.Event | None = None  # set: the refreshing thread ends
        _exporters.add(self)

    def refresh(self) -> bool:
        """Copy the pool into the metrics now; False while there is no pool."""
        pool = self._pool()
        if pool is None:
            return False
        reading = _read_own(pool, self._timeout)
        with self._lock:
            if not self._metrics:
                self._metrics = {metric.name: _live(metric) for metric in METRICS}
            if self._counted_for is None or self._counted_for() is not pool:
                self._counted.clear()  # a new pool counts from zero
                self._counted_for = weakref.ref(pool)
            for metric in METRICS:
                live = self._metrics[metric.name]
                for label, value in metric.read(reading):
                    child = live.labels(label) if _own_labels(metric) else live
                    if isinstance(child, Gauge):
                        child.set(value)
                    else:
                        before = self._counted.get((metric.name, label), 0.0)
                        if value > before:
                            child.inc(value - before)
                        self._counted[(metric.name, label)] = value
        return True

    def start(self) -> None:
        """Refresh every ``interval`` seconds in a daemon thread, if not already."""
        with self._lock:
            if self._stop is not None:
                return
            stop = self._stop = threading.Event()
        threading.Thread(
            target=self._run, args=(stop,), name="pdfpool-metrics", daemon=True
        ).start()

    def stop(self) -> None:
        """End the refreshing thread (the metrics keep their last values)."""
        with self._lock:
            if self._stop is not None:
                self._stop.set()
                self._stop = None

    def at_exit(self) -> None:
        """Count what happened since the last refresh, then remove this process's gauges
        (a server's ``child_exit`` hook does the same for a worker that was killed)."""
        self.stop()
        try:
            self.refresh()
        except Exception:
            logger.exception("the PDF pool metrics failed to refresh at exit")
        mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.refresh()
            except Exception:
                logger.exception("the PDF pool metrics failed to refresh")
            stop.wait(self.interval)

    def _after_fork(self) -> None:
        """In a forked child: another process, another pool; refresh in a thread of its
        own if the parent did."""
        running = self._stop is not None
        self._lock = threading.Lock()
        self._counted.clear()
        self._counted_for = None
        self._stop = None
        if running:
            self.start()


def _live(metric: MetricDefinition) -> Gauge | Counter:
    """The prometheus_client metric behind one definition, in no registry (multiprocess
    mode exports every metric through the files of its directory)."""
    labels = _own_labels(metric)
    if metric.kind == "counter":
        return Counter(metric.name, metric.help, labels, registry=None)
    return Gauge(metric.name, metric.help, labels, registry=None, multiprocess_mode="liveall")


_exporters: weakref.WeakSet[ProcessExporter] = weakref.WeakSet()


def _after_fork() -> None:
    for exporter in list(_exporters):
        exporter._after_fork()


os.register_at_fork(after_in_child=_after_fork)

_registered: PoolCollector | ProcessExporter | None = None
_registering = threading.Lock()


def register_metrics(
    registry: CollectorRegistry = REGISTRY, *, interval: float = 1.0
) -> PoolCollector | ProcessExporter:
    """Export the pool's metrics through prometheus_client, once per process: a
    ``PoolCollector`` in ``registry``, or in multiprocess mode a started ``ProcessExporter``
    (``registry`` unused: a ``MultiProcessCollector`` reads every process's files)."""
    global _registered
    with _registering:
        if _registered is None:
            if multiprocess_mode():
                exporter = ProcessExporter(interval=interval)
                exporter.start()
                atexit.register(exporter.at_exit)
                _registered = exporter
            else:
                collector = PoolCollector()
                registry.register(collector)
                _registered = collector
        return _registered
