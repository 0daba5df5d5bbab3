"""The pool's metrics through prometheus_client: one list of definitions behind both the
collector and the dependency-free endpoint; the collector in a process's registry, served
by prometheus_client's Django view; and multiprocess mode, with two real processes (started
apart, or forked from one that registered first, as under ``gunicorn --preload``), each
running real extractions, scraped through ``MultiProcessCollector``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from django.test import Client
from django.urls import path
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.django import PrometheusDjangoView
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from django_pdfpool import configured
from django_pdfpool.admission.local import Pool
from django_pdfpool.door import ARRIVING
from django_pdfpool.exceptions import PoolBusy
from django_pdfpool.status import collector as collector_module
from django_pdfpool.status.collector import PoolCollector, ProcessExporter, register_metrics
from django_pdfpool.status.metrics import METRICS, Reading, render
from tests.conftest import wait_until
from tests.support import pdfs
from tests.support.servers import project_env

ROOT = Path(__file__).resolve().parents[2]

urlpatterns = [path("metrics", PrometheusDjangoView.as_view())]
pytest_plugins = ["tests.support.redis_fixtures"]

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[dict[str, tuple[str, str]], Series]:
    """Families (name: type, help) and samples ((name, labels): value) of a scrape."""
    families, samples = {}, {}
    for family in text_string_to_metric_families(text):
        families[family.name] = (family.type, family.documentation)
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def scrape(registry: CollectorRegistry) -> tuple[dict[str, tuple[str, str]], Series]:
    return parse(generate_latest(registry).decode())


def run_jobs(pool, n: int) -> None:
    async def job() -> int:
        return 1

    async def main() -> None:
        for i in range(n):
            await pool.run(f"k{i}", "c", job)

    asyncio.run(main())


def test_the_collector_and_the_endpoint_render_the_one_list_of_definitions(pdfpool):
    pdfpool(SLOTS=3, QUEUE=1, WAIT=7, TIMEOUT=12)
    run_jobs(configured.get_pool(), 2)
    registry = CollectorRegistry()
    registry.register(PoolCollector())
    pool = configured.get_pool()
    hand_made = parse(render(Reading.now(pool.snapshot(), 12.0, os.getpid())))
    collected = scrape(registry)
    assert collected == hand_made  # same families, types, help texts, labels and values
    exposed = {
        name if kind == "gauge" else f"{name}_total" for name, (kind, _) in collected[0].items()
    }
    assert exposed == {m.name for m in METRICS}
    samples = collected[1]
    assert samples[("pdfpool_slots", ())] == 3 and samples[("pdfpool_timeout_seconds", ())] == 12
    assert samples[("pdfpool_jobs_total", (("event", "completed"),))] == 2
    assert samples[("pdfpool_process_info", (("pid", str(os.getpid())),))] == 1


def test_the_queue_wait_figures_cover_jobs_refused_after_waiting_and_say_so():
    """A job that waited its WAIT out and was refused never started: its wait counts in the
    queue-wait figures all the same (as on the status page), and their help says so."""
    pool = Pool(1, 1, 0.2)

    gate = threading.Event()

    async def held() -> None:  # on the pool's job loop
        while not gate.is_set():
            await asyncio.sleep(0.005)

    async def scene() -> None:
        running = asyncio.create_task(pool.run("a", "c1", held))
        while not pool.running():
            await asyncio.sleep(0.005)
        with pytest.raises(PoolBusy):
            await pool.run("b", "c2", held)
        gate.set()
        await running

    asyncio.run(scene())
    families, samples = parse(render(Reading.now(pool.snapshot(), 5.0, os.getpid())))
    assert samples[("pdfpool_jobs_total", (("event", "started"),))] == 1
    assert samples[("pdfpool_queue_wait_seconds", (("stat", "max"),))] >= 0.2
    assert "refused after waiting" in families["pdfpool_queue_wait_seconds"][1]


def test_registering_reads_no_pool_and_each_scrape_reads_it_afresh():
    pool = Pool(2, 2, None)
    reads = []

    def source():
        reads.append(1)
        return pool

    registry = CollectorRegistry(auto_describe=True)
    registry.register(PoolCollector(source, lambda: 5.0))
    assert reads == []  # registration used describe(), not the pool
    assert scrape(registry)[1][("pdfpool_jobs_total", (("event", "started"),))] == 0
    run_jobs(pool, 3)
    assert scrape(registry)[1][("pdfpool_jobs_total", (("event", "started"),))] == 3
    empty = CollectorRegistry()
    empty.register(PoolCollector(lambda: None))
    assert scrape(empty)[1] == {}  # no pool, no samples


@pytest.mark.urls("tests.status.test_metrics")
def test_registered_metrics_appear_in_the_default_registry_served_by_django(pdfpool, monkeypatch):
    monkeypatch.setattr(collector_module, "_registered", None)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    registry = CollectorRegistry()
    monkeypatch.setattr(PrometheusDjangoView, "registry", registry)
    first = register_metrics(registry)
    assert register_metrics(registry) is first and isinstance(first, PoolCollector)
    run_jobs(configured.get_pool(), 1)
    response = Client().get("/metrics")
    assert response.status_code == 200
    samples = parse(response.content.decode())[1]
    assert samples[("pdfpool_jobs_total", (("event", "completed"),))] >= 1


def test_the_exporter_counts_each_event_once_and_a_rebuilt_pool_from_zero():
    pool = Pool(1, 1, None)
    exporter = ProcessExporter(lambda: current, lambda: 5.0)
    current = pool

    def value(name: str, **labels: str) -> float:
        for family in exporter._metrics[name].collect():
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return s.value
        raise KeyError(name)

    run_jobs(pool, 2)
    assert exporter.refresh() and exporter.refresh()
    assert value("pdfpool_jobs_total", event="completed") == 2
    current = Pool(3, 1, None)
    run_jobs(current, 1)
    exporter.refresh()
    assert value("pdfpool_jobs_total", event="completed") == 3
    assert value("pdfpool_slots") == 3
    current = None
    assert not exporter.refresh()


def test_the_exporter_counts_each_event_once_when_two_refreshes_cross():
    """The refreshing thread and ``at_exit`` may refresh at once: the one that read the pool
    first, copying after the other, adds nothing the other already added."""
    pool, older_read, newer_copied = Pool(1, 1, None), threading.Event(), threading.Event()

    def timeout() -> float:  # read just after the pool: the first refresh waits there
        if not older_read.is_set():
            older_read.set()
            assert newer_copied.wait(10)
        return 5.0

    exporter = ProcessExporter(lambda: pool, timeout)
    run_jobs(pool, 1)
    older = threading.Thread(target=exporter.refresh)
    older.start()
    assert older_read.wait(10)
    run_jobs(pool, 2)
    exporter.refresh()
    newer_copied.set()
    older.join(10)
    run_jobs(pool, 1)
    exporter.refresh()
    (family,) = exporter._metrics["pdfpool_jobs_total"].collect()
    completed = [s.value for s in family.samples if s.labels == {"event": "completed"}]
    assert completed[0] == 4  # its ``_total``, then its ``_created``


def test_a_rebuilt_pool_leaves_the_doors_counters_as_they_were():
    """The door's counters are the process's, not the pool's: a new pool does not make the
    exporter add them again."""
    current = Pool(1, 1, None)
    exporter = ProcessExporter(lambda: current, lambda: 5.0)

    def shed() -> float:
        (family,) = exporter._metrics["pdfpool_door_shed_total"].collect()
        return next(s.value for s in family.samples if s.name == "pdfpool_door_shed_total")

    ARRIVING.count_shed()  # as the door does for an upload past its budget
    exporter.refresh()
    before = shed()
    assert before == ARRIVING.shed >= 1
    current = Pool(2, 1, None)
    exporter.refresh()
    assert shed() == before


def test_the_exporter_reads_a_redis_pools_own_figures_without_asking_redis(redis_server, make_pool):
    """A Redis pool's ``snapshot()`` is the cluster's; multiprocess mode sums the processes'
    counters itself, so the exporter takes this process's, from its memory: each second in
    every worker, a reading of the cluster (every job in flight, the books) would be waste."""
    mine, other = make_pool(2, 1, None), make_pool(2, 1, None)
    run_jobs(mine, 1)
    run_jobs(other, 3)
    exporter = ProcessExporter(lambda: mine, lambda: 5.0)

    def scripts_run() -> int:
        with redis_server.client() as client:
            stats = client.info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))

    before = scripts_run()
    for _ in range(3):
        assert exporter.refresh()
    assert scripts_run() == before
    (family,) = exporter._metrics["pdfpool_jobs_total"].collect()
    events = {s.labels["event"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert events["completed"] == 1


# --- multiprocess mode: two real processes ------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    import django
    django.setup()
    from django_pdfpool.exceptions import CallerBusy, ExtractionError
    from django_pdfpool.configured import get_pool
    from django_pdfpool.sandbox.extract import extract
    from django_pdfpool.status.collector import register_metrics

    def job(path):
        return lambda: extract(path, timeout=30, memory_limit=512 << 20)

    async def work(good, bad):
        pool = get_pool()
        first, second = await asyncio.gather(
            pool.run("good", "me", job(good)),
            pool.run("other", "me", job(good)),  # refused: one job per caller
            return_exceptions=True,
        )
        assert "hello" in first.text and isinstance(second, CallerBusy), (repr(first), second)
        try:
            await pool.run("bad", "me", job(bad))
        except ExtractionError:
            pass
        else:
            raise AssertionError("not a PDF, yet extracted")

    def worker():
        asyncio.run(work(sys.argv[2], sys.argv[3]))
        os.write(1, b"%d\\n" % os.getpid())  # one write: two workers share the pipe
        sys.stdin.read()  # until the test closes our stdin
        sys.exit(0)  # a normal exit: atexit runs

    if sys.argv[1] == "fork":  # as gunicorn --preload: register, then fork the workers
        register_metrics(interval=0.05)
        workers = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                worker()
            workers.append(pid)
        for pid in workers:
            os.waitpid(pid, 0)
    else:  # a process of its own: register as AppConfig.ready() would, then work
        register_metrics(interval=0.05)
        worker()
    """
)


def _start(mode: str, env: dict[str, str], good: Path, bad: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(good), str(bad)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("mode", ["spawn", "fork"])
def test_multiprocess_mode_exports_every_process_pool(tmp_path, mode):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (tmp_path / "staged").mkdir()
    good, bad = tmp_path / "good.pdf", tmp_path / "bad.pdf"
    good.write_bytes(pdfs.simple(["hello metrics"]))
    bad.write_bytes(pdfs.html())
    settings = {"SLOTS": 3}
    env = {
        **os.environ,
        **project_env(tmp_path / "staged"),
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "DJANGO_SETTINGS_MODULE": "tests.project.settings",
        "PDFPOOL_JSON": json.dumps(settings),
    }
    if mode == "spawn":
        processes = [_start(mode, env, good, bad) for _ in range(2)]
        pids = {p.stdout.readline().strip() for p in processes}
    else:
        processes = [_start(mode, env, good, bad)]
        pids = {processes[0].stdout.readline().strip() for _ in range(2)}
    try:
        assert len(pids) == 2 and all(pid.isdigit() for pid in pids), pids
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(directory))

        def samples() -> Series:
            return scrape(registry)[1]

        def both_counted() -> bool:
            found = samples()
            return (
                found.get(("pdfpool_jobs_total", (("event", "failed"),))) == 2
                and {
                    dict(labels)["pid"] for name, labels in found if name == "pdfpool_process_info"
                }
                == pids
            )

        wait_until(both_counted, timeout=30)
        families, found = scrape(registry)
        assert families["pdfpool_jobs"][0] == "counter"
        assert families["pdfpool_slots"] == ("gauge", "Jobs that may run at once.")
        assert found[("pdfpool_jobs_total", (("event", "started"),))] == 4
        assert found[("pdfpool_jobs_total", (("event", "completed"),))] == 2
        assert found[("pdfpool_refused_total", (("reason", "caller_busy"),))] == 2
        for pid in pids:
            assert found[("pdfpool_slots", (("pid", pid),))] == 3
            assert found[("pdfpool_running", (("pid", pid),))] == 0
            assert found[("pdfpool_run_seconds", (("pid", pid), ("stat", "max")))] > 0
    finally:
        for process in processes:
            process.stdin.close()
        for process in processes:
            process.wait(timeout=30)
    assert [p.returncode for p in processes] == [0] * len(processes)
    after = samples()  # the workers exited: their gauges went with them, counts stay
    assert not [name for name, _ in after if name == "pdfpool_process_info"]
    assert after[("pdfpool_jobs_total", (("event", "completed"),))] == 2
