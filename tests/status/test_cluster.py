"""The status page of a Redis-coordinated pool: its counters, recent-job figures and chart
are the cluster's (counted in Redis by the scripts that decide each event), and the page
says so; this process's own figures stand in a column of their own.

Two real worker processes (``tests.support.redis_worker``) share a namespace on a real
redis-server with the Django process serving the page, which only reads."""

from __future__ import annotations

import asyncio
import contextlib
import html
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.test import Client

from django_pdfpool import get_pool
from django_pdfpool.admission.ledger import Counters
from django_pdfpool.exceptions import PoolMisconfigured
from django_pdfpool.status.page import PROCESS_ONLY
from tests.conftest import held
from tests.status.test_page import URL, page_fields
from tests.support.redis_server import RedisServer, namespace_keys
from tests.support.redis_worker import Worker

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = [pytest.mark.django_db, pytest.mark.timeout(90)]

TERMS = {"slots": 1, "queue": 2, "wait": 3.0}  # every process of the namespace shares them
LEASE = 5.0  # long: a loaded machine delaying a beat must not end a lease here


@pytest.fixture(scope="module")
def workers() -> Iterator[list[Worker]]:
    started = [Worker() for _ in range(2)]
    yield [worker.ready() for worker in started]
    for worker in started:
        worker.close()


def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


class Namespace:
    """A namespace with a pool in each worker; ``ask``/``run`` talk to one of them."""

    def __init__(self, server: RedisServer, workers: list[Worker]) -> None:
        self.url, self.name = server.url, f"s-{uuid4().hex[:10]}"
        self.redis = redis.Redis.from_url(self.url, decode_responses=True)
        self.workers = workers
        for worker in workers:
            worker.ask("pool", name=self.name, namespace=self.name, url=self.url,
                       lease=LEASE, **TERMS)  # fmt: skip

    def run(self, worker: Worker, key: str, caller: str, **job: Any) -> str:
        return worker.send("run", pool=self.name, key=key, caller=caller, job=job)

    def join(self, worker: Worker, key: str, caller: str) -> str:
        return worker.send("run", pool=self.name, key=key, caller=caller, job=None)

    def open(self, gate: str) -> None:
        self.redis.set(f"test:{self.name}:gate:{gate}", 1)

    def counts(self) -> tuple[int, int]:
        running, queued, _ = self.workers[0].ask("counts", pool=self.name)
        return running, queued

    def waiting(self, key: str) -> int:
        fields = self.redis.hgetall(f"{{{self.name}}}:job:{key}")
        return sum(int(v) for name, v in fields.items() if name.startswith("w:"))

    def finish(self) -> None:
        for worker in self.workers:
            worker.ask("drain", pool=self.name, timeout=15)
        assert namespace_keys(self.url, self.name) == []
        for pattern in (f"test:{self.name}:*", f"{{{self.name}}}:*"):
            for key in self.redis.scan_iter(match=pattern):
                self.redis.delete(key)
        self.redis.close()


@pytest.fixture
def namespace_of_workers(redis_server, workers) -> Iterator[Namespace]:
    space = Namespace(redis_server, workers)
    yield space
    space.finish()


@contextlib.contextmanager
def ended_lease(url: str, namespace: str, lease: float = 2.0) -> Iterator[Worker]:
    """A worker holding a running job in ``namespace``, stopped (SIGSTOP) until Redis says its
    lease has ended; its keys stay another ``lease`` (their TTL is two) unless a script of
    another process reaps it. On the way out it resumes, finishes its job and drains."""
    worker, stopped = Worker().ready(), False
    try:
        process = worker.ask("pool", name="p", namespace=namespace, url=url, lease=lease)
        first = worker.send("run", pool="p", key="k", caller="c", job={"gate": "g"})
        with redis.Redis.from_url(url) as client:
            # stopped at its gate, not mid-way through a report (that read would time out)
            until(lambda: client.get(f"test:{namespace}:runs:k") == b"1")
            os.kill(worker.pid, signal.SIGSTOP)
            stopped = True

            def ended() -> bool:
                seconds, micros = client.time()
                end_ms = client.zscore(f"{{{namespace}}}:procs", process)
                return end_ms < seconds * 1e3 + micros / 1e3

            until(ended)
            yield worker
            os.kill(worker.pid, signal.SIGCONT)
            stopped = False
            client.set(f"test:{namespace}:gate:g", 1)
        assert worker.answer(first, timeout=20).get("ok") == "k"
        worker.ask("drain", pool="p", timeout=15)
    finally:
        if stopped:
            os.kill(worker.pid, signal.SIGCONT)
        worker.close()


def test_an_ended_lease_reads_ended_not_a_negative_duration(
    pdfpool, admin_client: Client, redis_server, namespace
):
    """A process stopped while it holds a job: until a script reaps it, its lease is past
    its end, which the page says in words (a negative duration reads as a clock skew)."""
    pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
    get_pool()  # built before the lease ends: building it runs no script that would reap
    with ended_lease(redis_server.url, namespace) as worker:
        data = admin_client.get(URL, {"format": "json"}).json()
        page = admin_client.get(URL).content.decode()
    hold = data["cluster"]["processes"][0]
    assert hold["pid"] == worker.pid and hold["lease_left"] < 0
    row = page.split('id="pdfpool-processes">', 1)[1].split("</tr>", 1)[0]
    assert row.endswith("<td>ended</td>"), row


def test_a_reading_redis_did_not_answer_says_every_figure_is_this_processs(
    pdfpool, admin_client: Client, own_redis, namespace
):
    """Redis silent during the page's reading: the pool is still in Redis mode (it judges the
    failure after), but the load and jobs shown are this process's, and the page says so."""
    pdfpool(REDIS={"URL": own_redis.url, "NAMESPACE": namespace, "TIMEOUT": 0.3})
    assert admin_client.get(URL, {"format": "json"}).json()["scope"] == "cluster"
    own_redis.pause()
    try:
        page = admin_client.get(URL).content.decode()
    finally:
        own_redis.resume()
    said = html.unescape(page.split('id="pdfpool-scope">', 1)[1].split("</span>", 1)[0])
    assert "cluster-wide" not in said and "every figure below is this process's" in said, said


def test_a_reading_redis_did_not_answer_does_not_say_work_is_accepted(
    pdfpool, admin_client: Client, own_redis, namespace
):
    """Redis silent during the page's reading, FALLBACK "refuse" (the default): new work is
    about to be refused, so the badge, red, says the reading could not tell, never
    "accepting work"; the command says it as the page does."""
    pdfpool(REDIS={"URL": own_redis.url, "NAMESPACE": namespace, "TIMEOUT": 0.3})
    assert admin_client.get(URL, {"format": "json"}).json()["scope"] == "cluster"
    own_redis.pause()
    try:
        page = admin_client.get(URL).content.decode()
    finally:
        own_redis.resume()
    badge = page.split('<span class="pdfpool-state', 1)[1].split("</span>", 1)[0]
    classes, said = badge.split('"', 1)[0].split(), badge.split(">", 1)[1]
    assert classes == ["refusing"] and said != "accepting work", badge


def error_of(worker: Worker, cid: str) -> str | None:
    return worker.answer(cid, timeout=20).get("error")


def test_the_page_counts_what_every_process_did(
    pdfpool, admin_client: Client, namespace_of_workers: Namespace
):
    ns, (a, b) = namespace_of_workers, namespace_of_workers.workers
    url = ns.url
    pdfpool(REDIS={"URL": url, "NAMESPACE": ns.name, "LEASE": LEASE},
            SLOTS=1, QUEUE=2, WAIT=3.0)  # fmt: skip
    assert get_pool().cluster_snapshot() is not None

    first = ns.run(a, "k1", "c1", gate="g1")  # A starts k1
    until(lambda: ns.counts() == (1, 0))
    shared = ns.join(b, "k1", "c2")  # B shares it
    until(lambda: ns.waiting("k1") == 2)
    waits = [ns.run(b, "k2", "c3", gate="g2")]  # B queues k2
    until(lambda: ns.counts() == (1, 1))
    left = ns.run(a, "k6", "c6", gate="g6")  # A queues k6, then its caller leaves
    until(lambda: ns.counts() == (1, 2))
    a.ask("cancel", of=left)
    until(lambda: ns.counts() == (1, 1))
    waits.append(ns.run(a, "k7", "c7", gate="g7"))  # A queues k7: the queue is full
    until(lambda: ns.counts() == (1, 2))
    assert error_of(a, ns.run(a, "k3", "c4")) == "PoolBusy"  # refused: a full queue
    assert error_of(b, ns.run(b, "k4", "c1")) == "CallerBusy"  # refused: c1 runs k1
    assert [error_of(w, cid) for w, cid in zip((b, a), waits, strict=True)] == ["PoolBusy"] * 2
    ns.open("g1")  # k1 completes, for both its callers
    assert a.answer(first, timeout=20).get("ok") == "k1", a.answer(first)
    assert b.answer(shared).get("ok") == "k1", b.answer(shared)
    assert error_of(a, ns.run(a, "k5", "c5", error="boom")) == "LookupError"  # failed

    data = admin_client.get(URL, {"format": "json"}).json()
    cluster_wide = Counters(started=2, joined=1, completed=1, failed=1, abandoned=1,
                            refused_busy=3, refused_caller=1)  # fmt: skip
    assert data["scope"] == "cluster" and data["counters"] == vars(cluster_wide)
    assert data["cluster"]["local"]["counters"] == vars(Counters())  # this one only read
    assert data["queue_wait"]["count"] == 4  # k1 and k5 started; k2 and k7 gave up
    assert data["queue_wait"]["max"] >= 3.0  # they waited WAIT
    assert data["run_time"]["count"] == 2  # k1, k5
    assert data["counted_since"] <= data["taken_at"]

    page = admin_client.get(URL).content.decode()
    fields = page_fields(page)
    for name, value in vars(cluster_wide).items():
        local = f"cluster.local.counters.{name}"
        assert fields[local] == "0", name
        if name in PROCESS_ONLY:  # counted by each process alone: no cluster figure
            assert f"counters.{name}" not in fields
        else:
            assert fields[f"counters.{name}"] == str(value), name
    assert fields["queue_wait.count"] == "4" and fields["run_time.count"] == "2"
    assert "below are cluster-wide" in page and "Counted in Redis since" in page
    assert '<th class="num">Cluster</th><th class="num">This process</th>' in page

    books = [f"{{{ns.name}}}:{name}" for name in ("stats", "qwait", "runs")]
    assert all(ns.redis.pttl(key) > 24 * 3600 * 1000 for key in books)  # they outlive jobs


def test_redis_counts_each_event_once_however_many_processes_share_it(
    pdfpool, namespace_of_workers: Namespace
):
    """A job shared by callers in both workers: one start, one end, each sharer a join;
    the outcome, sent to Redis in two steps (``need``, then the data), counts once."""
    ns, (a, b) = namespace_of_workers, namespace_of_workers.workers
    pdfpool(REDIS={"URL": ns.url, "NAMESPACE": ns.name, "LEASE": LEASE},
            SLOTS=1, QUEUE=2, WAIT=3.0)  # fmt: skip
    first = ns.run(a, "k", "c1", gate="g")
    until(lambda: ns.counts() == (1, 0))
    joins = [ns.join(b, "k", f"j{i}") for i in range(3)] + [ns.join(a, "k", "j3")]
    until(lambda: ns.waiting("k") == 5)
    ns.open("g")
    assert a.answer(first, timeout=20)["ok"] == "k"
    assert [(b if i < 3 else a).answer(cid)["ok"] for i, cid in enumerate(joins)] == ["k"] * 4
    snap = get_pool().snapshot()
    assert snap.scope == "cluster"
    assert (snap.counters.started, snap.counters.joined, snap.counters.completed) == (1, 4, 1)
    assert (snap.queue_wait.count, snap.run_time.count) == (1, 1)


@pytest.mark.django_db
@pytest.mark.urls("tests.project.status_urls")
def test_a_scrape_reports_the_counters_redis_counts_and_none_while_it_is_out(
    pdfpool, own_redis, namespace
):
    """The cluster's counters, never this process's books in their place during an outage
    (Prometheus would read a reset, then a spike): absent until Redis answers again; and no
    ``closed`` sample, which no process counts in Redis."""
    import asyncio

    from django_pdfpool.conf import get_settings
    from django_pdfpool.configured import _build
    from tests.status.test_metrics import parse, run_jobs

    redis_options = {"URL": own_redis.url, "NAMESPACE": namespace, "LEASE": 2.0, "TIMEOUT": 0.5}
    pdfpool(REDIS={**redis_options, "FALLBACK": "local"})
    other = _build(get_settings())  # another process's pool in the namespace

    def counters() -> dict[tuple[str, str], float]:
        samples = parse(Client().get("/metrics/").content.decode())[1]
        return {
            (name, dict(labels).get("event") or dict(labels)["reason"]): value
            for (name, labels), value in samples.items()
            if name in ("pdfpool_jobs_total", "pdfpool_refused_total")
        }

    run_jobs(other, 5)
    run_jobs(get_pool(), 2)
    seen = counters()
    assert seen[("pdfpool_jobs_total", "completed")] == 7
    assert ("pdfpool_refused_total", "closed") not in seen
    own_redis.pause()
    try:
        run_jobs(get_pool(), 1)  # in this process's fallback books
        assert counters() == {}
    finally:
        own_redis.resume()
    deadline = time.monotonic() + 30
    while get_pool().cluster_snapshot().mode != "redis":
        assert time.monotonic() < deadline, "Redis mode never came back"
        time.sleep(0.05)
    assert counters()[("pdfpool_jobs_total", "completed")] >= 7
    asyncio.run(other.stop())


def test_the_page_says_redis_refuses_every_job_of_this_processs_settings(
    pdfpool, admin_client: Client, make_pool, redis_server, namespace
):
    """A live process of the namespace is of another deployment: every job of the page's
    process is refused ``misconfigured``, and its badge and JSON say so and why, not
    "accepting work" with the other deployment's load as its cluster's."""
    other = make_pool(1, 2, 3.0, deployment="other-deployment")
    gate = threading.Event()
    thread = threading.Thread(target=lambda: asyncio.run(other.run("k", "c", held(1, gate))))
    thread.start()
    try:
        until(lambda: other.running() == 1)
        pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
        data = admin_client.get(URL, {"format": "json"}).json()
        page = admin_client.get(URL).content.decode()
        with pytest.raises(PoolMisconfigured) as refused:
            asyncio.run(get_pool().run("k2", "c2", held(2, gate)))
    finally:
        gate.set()
        thread.join(20)
    said = data["cluster"]["mismatch"]
    assert said == str(refused.value) and "Another deployment uses" in said
    badge = page.split('id="pdfpool-state"', 1)[1].split(">", 1)[1].split("</", 1)[0]
    assert html.unescape(badge).strip() == f"refusing every job: {said}", badge
