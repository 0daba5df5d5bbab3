"""The pool's metrics (``metrics.METRICS``) through prometheus_client, the ``[prometheus]``
extra: read at each scrape (``PoolCollector``), or copied every second into the files of its
multiprocess mode (``ProcessExporter``); ``register_metrics`` picks (docs/metrics.md)."""

from __future__ import annotations

import atexit
import itertools
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
from .metrics import METRICS, PID_LABEL, MetricDefinition, Reading, own_snapshot

logger = logging.getLogger("django_pdfpool.metrics")

PoolSource = Callable[[], AdmissionPool | None]  # get_pool, peek_pool, or your own


def _timeout() -> float:
    return get_settings().timeout


class PoolCollector:
    """A collector for one process's registry: the pool (by default ``get_pool``'s, built
    if need be, as ``metrics_view`` does) read at each scrape."""

    def __init__(self, pool: PoolSource = get_pool, timeout: Callable[[], float] = _timeout):
        self._pool, self._timeout = pool, timeout

    def describe(self) -> list[Metric]:
        """The metrics without samples, so that registering reads no pool."""
        return [_family(metric, None) for metric in METRICS]

    def collect(self) -> Iterator[Metric]:
        """Every metric, from one snapshot; nothing while there is no pool."""
        pool = self._pool()
        if pool is not None:
            reading = Reading.of(pool, self._timeout(), os.getpid())
            yield from (_family(metric, reading) for metric in METRICS)


def _family(metric: MetricDefinition, reading: Reading | None) -> Metric:
    kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
    family = kind(metric.name, metric.help, labels=[metric.label] if metric.label else [])
    for label, value in metric.samples(reading) if reading else ():
        family.add_metric([label] if metric.label else [], value)
    return family


class ProcessExporter:
    """Multiprocess mode: this process's own figures copied every ``interval`` seconds into
    gauges (a series per live process) and counters; a process appears once it has a pool."""

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
        self._reads = itertools.count()  # each refresh's place, taken before it reads the pool
        self._lock = threading.Lock()  # guards the fields below
        self._copied = -1  # the place of the last reading copied: an earlier one is stale
        self._counted: dict[tuple[str, str], float] = {}  # counter values already added
        self._counted_for: weakref.ref[AdmissionPool] | None = None  # the pool they are of
        self._stop: threading.Event | None = None  # set: the refreshing thread ends
        os.register_at_fork(after_in_child=self._after_fork)

    def refresh(self) -> bool:
        """Copy the pool into the metrics now; False while there is no pool."""
        place, pool = next(self._reads), self._pool()
        if pool is None:
            return False
        reading = Reading.now(own_snapshot(pool), self._timeout(), os.getpid())
        with self._lock:
            if place < self._copied:  # a refresh that read the pool later was copied
                return True
            self._copied = place
            if not self._metrics:
                self._metrics = {metric.name: _live(metric) for metric in METRICS}
            if self._counted_for is None or self._counted_for() is not pool:
                self._counted = {  # a new pool counts from zero; the door goes on
                    key: value for key, value in self._counted.items() if key[0] in _OF_PROCESS
                }
                self._counted_for = weakref.ref(pool)
            for metric in METRICS:
                live = self._metrics[metric.name]
                for label, value in metric.samples(reading):
                    child = live if metric.label in (None, PID_LABEL) else live.labels(label)
                    if isinstance(child, Gauge):
                        child.set(value)
                    else:
                        before = self._counted.get((metric.name, label), 0.0)
                        child.inc(max(0.0, value - before))
                        self._counted[(metric.name, label)] = value
        return True

    def start(self) -> None:
        """Refresh every ``interval`` seconds in a daemon thread; started once per process."""
        stop = self._stop = threading.Event()
        threading.Thread(
            target=self._run, args=(stop,), name="pdfpool-metrics", daemon=True
        ).start()

    def at_exit(self) -> None:
        """End the refreshing thread, count what happened since its last refresh, then remove
        this process's gauges (a server's ``child_exit`` hook does so for a killed worker)."""
        with self._lock:
            if self._stop is not None:
                self._stop.set()
                self._stop = None
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
        self._counted_for = self._stop = None
        if running:
            self.start()


_OF_PROCESS = {metric.name for metric in METRICS if not metric.of_pool}


def _live(metric: MetricDefinition) -> Gauge | Counter:
    """The prometheus_client metric behind one definition, in no registry (the files are);
    its labels but ``pid``, which multiprocess mode adds itself."""
    labels = [] if metric.label in (None, PID_LABEL) else [str(metric.label)]
    if metric.kind == "counter":
        return Counter(metric.name, metric.help, labels, registry=None)
    return Gauge(metric.name, metric.help, labels, registry=None, multiprocess_mode="liveall")


_registered: PoolCollector | ProcessExporter | None = None
_registering = threading.Lock()


def register_metrics(
    registry: CollectorRegistry = REGISTRY, *, interval: float = 1.0
) -> PoolCollector | ProcessExporter:
    """Export the pool's metrics through prometheus_client, once per process: a
    ``PoolCollector`` in ``registry``, or in multiprocess mode a started ``ProcessExporter``."""
    global _registered
    with _registering:
        multiprocess = {"PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"} & set(os.environ)
        if _registered is None and multiprocess:  # prometheus_client's own test
            _registered = exporter = ProcessExporter(interval=interval)
            exporter.start()
            atexit.register(exporter.at_exit)
        elif _registered is None:
            _registered = PoolCollector()
            registry.register(_registered)
        return _registered
