"""The Redis pool across OS processes: worker processes (spawned, each a fresh
interpreter with its own job loop) share one real redis-server and one namespace.

Each test ends by draining every worker's pool and checking, by SCAN, that no key
of the namespace is left."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.exceptions import RunnerLost
from tests.support.outages import run
from tests.support.redis_proxy import HoldingProxy
from tests.support.redis_server import LEASE, RedisServer, namespace_keys
from tests.support.redis_worker import Worker

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def workers() -> Iterator[list[Worker]]:
    """Three worker processes, shared by the module's tests (each test its own namespace)."""
    started = [Worker() for _ in range(3)]
    yield [worker.ready() for worker in started]
    for worker in started:
        worker.close()


class Cluster:
    """One namespace on one server, a pool in each worker, and an observer pool here
    (it only reads: it never admits, so it holds nothing in Redis)."""

    def __init__(self, server: RedisServer, workers: list[Worker], **options: Any) -> None:
        self.url, self.namespace = server.url, f"x-{uuid4().hex[:10]}"
        self.workers = list(workers)
        self.options = options
        self.redis = redis.Redis.from_url(self.url, decode_responses=True)
        self.observer = RedisPool(
            options.get("slots", 2),
            options.get("queue", 4),
            options.get("wait", 10.0),
            url=self.url,
            namespace=self.namespace,
        )
        for worker in self.workers:
            self.add(worker)

    def add(self, worker: Worker) -> Worker:
        worker.ask("pool", name=self.namespace, namespace=self.namespace, url=self.url,
                   lease=LEASE, **self.options)  # fmt: skip
        if worker not in self.workers:
            self.workers.append(worker)
        return worker

    def run(self, worker: Worker, key: str, caller: str, **job: Any) -> str:
        return worker.send("run", pool=self.namespace, key=key, caller=caller, job=job)

    def join(self, worker: Worker, key: str, caller: str) -> str:
        return worker.send("run", pool=self.namespace, key=key, caller=caller, job=None)

    def open(self, gate: str) -> None:
        self.redis.set(f"test:{self.namespace}:gate:{gate}", 1)

    def started(self) -> list[str]:
        return self.redis.lrange(f"test:{self.namespace}:started", 0, -1)

    def runs(self, key: str) -> int:
        return int(self.redis.get(f"test:{self.namespace}:runs:{key}") or 0)

    def peak(self) -> int:
        return int(self.redis.get(f"test:{self.namespace}:peak") or 0)

    def counts(self, worker: Worker) -> list[Any]:
        return worker.ask("counts", pool=self.namespace)

    def finish(self) -> None:
        """Drain every live worker's pool; then the namespace must hold no key."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.ask("drain", pool=self.namespace, timeout=15)
        assert namespace_keys(self.url, self.namespace) == []
        for key in self.redis.scan_iter(match=f"test:{self.namespace}:*"):
            self.redis.delete(key)
        self.redis.close()


@pytest.fixture
def cluster(redis_server: RedisServer, workers: list[Worker]) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**options: Any) -> Cluster:
        made.append(Cluster(redis_server, workers, **options))
        return made[-1]

    yield make
    for cluster in made:
        cluster.finish()


def until(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_running_jobs_never_exceed_the_slots_across_processes(cluster):
    c = cluster(slots=2, queue=30, wait=20.0)
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(c.observer.running())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    calls = [
        (worker, c.run(worker, f"k{w}-{i}", f"c{w}-{i}", sleep=0.03))
        for i in range(8)
        for w, worker in enumerate(c.workers)
    ]
    answers = [worker.answer(cid, timeout=30) for worker, cid in calls]
    stop.set()
    sampler.join()
    assert all("ok" in answer for answer in answers), answers
    assert max(samples) <= 2, "Redis counted more running jobs than slots"
    assert c.peak() == 2, "the jobs themselves saw more (or fewer) than 2 running at once"
    assert len(c.started()) == 24


def test_identical_keys_from_different_processes_run_once(cluster):
    c = cluster(slots=2, queue=2)
    first, second, third = c.workers
    starter = c.run(first, "doc", "alice", gate="g", result="text")
    until(lambda: c.started() == ["doc"])
    sharers = [
        (second, c.run(second, "doc", "bob", result="other")),  # a fn of its own: still joins
        (third, c.join(third, "doc", "carol")),
    ]
    until(lambda: c.observer.waiting("doc") == 2)
    c.open("g")
    assert first.answer(starter)["ok"] == "text"
    assert [worker.answer(cid)["ok"] for worker, cid in sharers] == ["text", "text"]
    assert c.runs("doc") == 1


def test_a_caller_busy_in_one_process_is_refused_in_another(cluster):
    c = cluster(slots=2, queue=2)
    first, second, _ = c.workers
    held = c.run(first, "a", "alice", gate="g")
    until(lambda: c.started() == ["a"])
    began = time.monotonic()
    refused = second.answer(c.run(second, "b", "alice"))
    assert refused["error"] == "CallerBusy", refused
    assert time.monotonic() - began < 1.0
    joined = c.join(second, "a", "alice")  # joining is allowed while busy (rule 1)
    until(lambda: c.observer.waiting("a") == 1)
    c.open("g")
    assert first.answer(held)["ok"] == second.answer(joined)["ok"] == "a"
    assert c.runs("b") == 0


def test_the_queue_is_first_come_first_served_across_processes(cluster):
    c = cluster(slots=1, queue=5)
    first, second, third = c.workers
    calls = [(first, c.run(first, "hold", "h", gate="g"))]
    until(lambda: c.observer.running() == 1)
    order = [(second, "a"), (third, "b"), (first, "c"), (second, "d"), (third, "e")]
    for i, (worker, key) in enumerate(order, start=1):
        calls.append((worker, c.run(worker, key, f"caller-{key}")))
        until(lambda i=i: c.observer.queued() == i)
    c.open("g")
    assert [worker.answer(cid)["ok"] for worker, cid in calls] == ["hold", "a", "b", "c", "d", "e"]
    assert c.started() == ["hold", "a", "b", "c", "d", "e"]


def test_sigkill_of_a_slot_holder_frees_it_within_the_lease(cluster):
    victim = Worker().ready()
    try:
        c = cluster(slots=1, queue=2)
        c.add(victim)
        first, second, _ = c.workers[:3]
        c.run(victim, "doomed", "v", gate="never")
        until(lambda: c.started() == ["doomed"])
        queued = c.run(first, "next", "n")
        shared = c.join(second, "doomed", "s")
        until(lambda: c.observer.queued() == 1 and c.observer.waiting("doomed") == 1)
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        until(lambda: "next" in c.started(), timeout=LEASE + 1.0)
        assert first.answer(queued)["ok"] == "next"
        lost = second.answer(shared, timeout=LEASE + 1.0)
        assert lost["error"] == "RunnerLost" and lost["code"] == "runner_lost", lost
        assert time.monotonic() - killed < LEASE + 1.0
        assert c.observer.running() == 0
    finally:
        victim.process.kill()
        victim.process.wait()


@pytest.mark.parametrize("fallback", ["refuse", "local"])
def test_a_redis_restart_mid_run_ends_as_documented(own_redis, workers, fallback):
    """Redis dies while a job runs: that job still answers its own caller, its sharer
    in another process gets a 503-class refusal, new calls are refused (or run
    locally), and once Redis is back the limits are shared again; nothing is left."""
    c = Cluster(own_redis, workers[:2], slots=1, queue=0, fallback=fallback)
    first, second = c.workers
    running = c.run(first, "long", "a", sleep=1.5, report=False)
    until(lambda: c.observer.running() == 1)
    shared = c.join(second, "long", "b")
    until(lambda: c.observer.waiting("long") == 1)
    own_redis.kill()
    began = time.monotonic()
    new = second.answer(c.run(second, "new", "c", report=False))
    assert time.monotonic() - began < 1.5
    if fallback == "refuse":
        assert new["error"] == "CoordinatorUnavailable" and new["code"] == "unavailable", new
        assert c.counts(second)[2] == "refusing"
    else:
        assert new["ok"] == "new"
        assert c.counts(second)[2] == "local-fallback"
    time.sleep(0.3)
    own_redis.start()  # the same port, empty
    assert first.answer(running, timeout=5)["ok"] == "long"  # its own caller is answered
    shared_answer = second.answer(shared, timeout=LEASE + 3)  # the result if it was counted
    assert shared_answer.get("ok") == "long" or shared_answer["error"] in (  # again in time
        "CoordinatorUnavailable",
        "RunnerLost",
    ), shared_answer
    for worker in c.workers:
        until(lambda worker=worker: c.counts(worker)[2] == "redis", timeout=5)
    c.redis = redis.Redis.from_url(c.url, decode_responses=True)
    held = c.run(first, "after", "a", gate="g")
    until(lambda: c.observer.running() == 1)
    assert second.answer(c.run(second, "other", "d"))["error"] == "PoolBusy"  # shared again
    c.open("g")
    assert first.answer(held)["ok"] == "after"
    c.finish()


def test_a_join_after_a_paused_worker_resumed_waits_for_its_job(cluster, redis_server):
    """A worker paused past the lease is reaped: a sharer of its running job in another
    process gets RunnerLost. Once it resumes, its job is counted again (the same job): a
    call joining it now waits for its result, never that stale RunnerLost (kept in the
    sharer's process for a join whose reply was on its way, here an unrelated call)."""
    victim = Worker().ready()
    proxy = HoldingProxy(redis_server.port)
    try:
        c = cluster(slots=2, queue=2)
        c.add(victim)
        url = f"redis://127.0.0.1:{proxy.port}/0"
        here = RedisPool(2, 2, 10.0, url=url, namespace=c.namespace, lease=LEASE, timeout=10.0)
        owner = c.run(victim, "k", "a", gate="g")
        until(lambda: c.started() == ["k"])

        async def scenario() -> None:
            first = asyncio.create_task(here.run("k", "b", None))
            await asyncio.to_thread(until, lambda: c.observer.waiting("k") == 1)
            proxy.marker = b"unrelated"  # an admission on its way all along
            unrelated = asyncio.create_task(here.run("unrelated", "u", None))
            await asyncio.to_thread(until, proxy.held.is_set)
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                with pytest.raises(RunnerLost):
                    await asyncio.wait_for(first, LEASE + 2.0)
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            await asyncio.to_thread(until, lambda: c.observer.running() == 1)  # counted again
            second = asyncio.create_task(here.run("k", "c", None))
            await asyncio.to_thread(until, lambda: c.observer.waiting("k") == 1 or second.done())
            assert not second.done(), second.exception()
            proxy.released.set()
            c.open("g")
            assert await asyncio.wait_for(second, 10) == "k"
            with pytest.raises(ValueError):  # nothing to join
                await unrelated
            await here.drain()

        run(scenario)
        assert victim.answer(owner)["ok"] == "k"
        victim.ask("drain", pool=c.namespace)
    finally:
        proxy.close()
        victim.process.kill()
        victim.process.wait()


def test_a_paused_worker_whose_key_ran_again_elsewhere_finishes_without_stealing_its_slot(
    cluster,
):
    """A worker paused past its lease is reaped; its key starts again in another process.
    When it resumes, its job finishes and answers its own caller; the key's new job keeps
    its slot (the resumed one never counted over it), and once both end no slot is held."""
    victim = Worker().ready()
    try:
        c = cluster(slots=1, queue=2)
        c.add(victim)
        first = c.workers[0]
        owner = c.run(victim, "k", "a", gate="g")
        until(lambda: c.started() == ["k"])
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            until(lambda: c.observer.running() == 0, timeout=LEASE * 3 + 2)  # reaped
            again = c.run(first, "k", "b", gate="h")
            until(lambda: c.started() == ["k", "k"])
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        seen, deadline = set(), time.monotonic() + 3 * LEASE  # the resumed worker beats
        while time.monotonic() < deadline:
            seen.add(c.observer.running())
            time.sleep(0.005)
        assert seen == {1}, "the resumed job was counted over the key's new one"
        c.open("g")
        assert victim.answer(owner)["ok"] == "k"
        assert c.observer.running() == 1 and c.observer.pressure("k").in_flight
        c.open("h")
        assert first.answer(again)["ok"] == "k"
        until(lambda: c.observer.running() == 0 and c.observer.queued() == 0)
        victim.ask("drain", pool=c.namespace)
    finally:
        victim.process.kill()
        victim.process.wait()
