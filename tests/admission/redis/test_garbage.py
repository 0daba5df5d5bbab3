"""Bad data in Redis: whatever another program, a hand-typed command or a bug leaves in the
namespace's keys (a key of the wrong type, counts that are not whole numbers, fields that
make no sense, members that name nothing), the Redis pool skips it and cleans it, keeps
answering every reading (the status page, HTML and JSON, and the snapshot the example's
job-state endpoint reads), never falls back for it, and is whole again within a lease.

Each test writes its garbage into a real redis-server with a client of its own, under
jobs that are held running and queued.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.exceptions import PoolBusy
from tests.conftest import held
from tests.support.redis_server import LEASE, namespace_keys

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(60)

WHOLE_AGAIN = LEASE + 1.0  # seconds for the pool to count what runs again (beats: lease/3)

# each state key, and garbage of another type than the pool keeps there
WRONG_TYPE: dict[str, Callable[[redis.Redis, str], Any]] = {
    "running": lambda r, k: r.set(k, "garbage"),
    "queue": lambda r, k: r.set(k, "garbage"),
    "callers": lambda r, k: r.rpush(k, "garbage"),
    "procs": lambda r, k: r.set(k, "garbage"),
    "terms": lambda r, k: r.sadd(k, "garbage"),
    "stats": lambda r, k: r.set(k, "garbage"),
    "qwait": lambda r, k: r.hset(k, "garbage", "1"),
    "runs": lambda r, k: r.sadd(k, "garbage"),
    "tick": lambda r, k: r.hset(k, "garbage", "1"),
}


def run(scenario: Callable[[], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 30))


async def until(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.01)


def readings(pool: RedisPool) -> tuple[int, int]:
    """Everything a page or an endpoint reads: none may raise."""
    pool.waiting("k1")
    pool.pressure("k1", "someone")
    snapshot = pool.snapshot()
    cluster = pool.cluster_snapshot()
    assert cluster.mode == "redis"
    snapshot.as_dict()
    return pool.running(), pool.queued()


class Held:
    """Two pools of one namespace; ``here`` runs k1 (held) and queues k2 (SLOTS 1)."""

    def __init__(self, make_pool: Callable[..., RedisPool], url: str) -> None:
        self.here, self.there = make_pool(1, 2, 20.0), make_pool(1, 2, 20.0)
        self.prefix = "{" + self.here.namespace + "}:"
        self.redis = redis.Redis.from_url(url, decode_responses=True)
        self.gate = threading.Event()
        self.calls: list[str] = []
        self.tasks: list[asyncio.Task[Any]] = []

    async def hold(self) -> None:
        self.tasks.append(asyncio.create_task(self.here.run("k1", "a", self.job("K1"))))
        await until(lambda: self.here.running() == 1, 5, "k1 running")
        self.tasks.append(asyncio.create_task(self.here.run("k2", "b", self.job("K2"))))
        await until(lambda: self.here.queued() == 1, 5, "k2 queued")
        self.tasks.append(asyncio.create_task(self.there.run("k1", "c", None)))  # a sharer
        await until(lambda: self.here.waiting("k1") == 1, 5, "the sharer of k1")

    def job(self, value: str) -> Any:
        return held(value, self.gate, self.calls)

    async def release(self) -> list[Any]:
        self.gate.set()
        return await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.mark.parametrize("name", sorted(WRONG_TYPE))
def test_a_state_key_of_the_wrong_type_is_cleaned_and_counted_again(
    make_pool, redis_server, name, caplog
):
    """The issue's ``SET {pdfpool}:running garbage``, and the same for every key: no
    script fails on it (no fallback, no 503), readings never raise, and within a lease
    Redis counts again the running and the queued job (their owner's beat)."""
    caplog.set_level(logging.WARNING, logger="django_pdfpool.redis")
    cluster = Held(make_pool, redis_server.url)

    async def scenario() -> None:
        await cluster.hold()
        cluster.redis.delete(cluster.prefix + name)
        WRONG_TYPE[name](cluster.redis, cluster.prefix + name)
        readings(cluster.here)
        await until(lambda: readings(cluster.here) == (1, 1), WHOLE_AGAIN, "counted again")
        # within a lease the limits hold again, and new work is taken: k3 takes the last
        # queue place (refused as busy while the pool rebuilds), k4 finds the queue full
        deadline = time.monotonic() + WHOLE_AGAIN
        while True:
            k3 = asyncio.create_task(cluster.there.run("k3", "d", cluster.job("K3")))
            await until(lambda k3=k3: k3.done() or cluster.here.queued() == 2, 5, "k3 answered")
            if not k3.done():
                break
            assert isinstance(k3.exception(), PoolBusy), k3.exception()
            assert "recounting its work" in str(k3.exception()) or "busy" in str(k3.exception())
            assert time.monotonic() < deadline, "no new call queued within a lease"
            await asyncio.sleep(0.05)
        cluster.tasks.append(k3)
        with pytest.raises(PoolBusy):
            await cluster.there.run("k4", "e", cluster.job("K4"))
        assert await cluster.release() == ["K1", "K2", "K1", "K3"]

    run(scenario)
    assert cluster.here.mode == cluster.there.mode == "redis"
    assert "failed" not in caplog.text and "refused" not in caplog.text
    assert sorted(cluster.calls) == ["K1", "K2", "K3"]


def test_counts_that_are_not_whole_numbers_are_skipped_and_removed(make_pool, redis_server):
    """``w:<proc> lots`` (the issue's), a negative count and a starter flag that is not one:
    readings skip them (no 500 on a page); the next script removes them; the job's own
    callers are answered."""
    cluster = Held(make_pool, redis_server.url)

    async def scenario() -> None:
        await cluster.hold()
        jk = cluster.prefix + "job:k1"
        cluster.redis.hset(jk, mapping={"w:ghost": "lots", "w:other": "-3", "sw": "yes"})
        readings(cluster.here)
        assert cluster.here.waiting("k1") >= 1
        await until(lambda: not cluster.redis.hexists(jk, "w:ghost"), WHOLE_AGAIN, "cleaned")
        assert not cluster.redis.hexists(jk, "w:other")
        assert await cluster.release() == ["K1", "K2", "K1"]

    run(scenario)


@pytest.mark.parametrize(
    "fields",
    [{"state": "weird"}, {"qt": "yesterday"}, {"id": ""}, {"st": "soon"}],
    ids=["state", "qt", "id", "st"],
)
def test_a_job_whose_fields_make_no_sense_is_dropped_and_counted_again(
    make_pool, redis_server, fields
):
    """A running job's hash with a field no script writes: the job is dropped from Redis
    (never an error), and its owner's next beat counts it again; its callers here get the
    result; the sharer elsewhere gets the result or RunnerLost (its job vanished)."""
    cluster = Held(make_pool, redis_server.url)

    async def scenario() -> list[Any]:
        await cluster.hold()
        cluster.redis.hset(cluster.prefix + "job:k1", mapping=fields)
        readings(cluster.here)
        await until(lambda: readings(cluster.here) == (1, 1), WHOLE_AGAIN, "counted again")
        return await cluster.release()

    own, queued, sharer = run(scenario)
    assert (own, queued) == ("K1", "K2")
    assert sharer == "K1" or type(sharer).__name__ == "RunnerLost", sharer
    assert sorted(cluster.calls) == ["K1", "K2"]


def test_members_that_name_nothing_free_their_places(make_pool, redis_server, namespace):
    """Slots taken by keys that are not jobs, a queue place likewise, a caller held by
    nothing, a process with an impossible lease and terms that are not terms: a new call
    takes the free slot at once; the ghosts are gone within a lease."""
    pool = make_pool(2, 1, 20.0)
    prefix = "{" + namespace + "}:"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    gate, calls = threading.Event(), []

    async def scenario() -> None:
        gate.set()
        assert await pool.run("warm", "w", held("W", gate)) == "W"  # registered
        gate.clear()
        client.sadd(prefix + "running", "ghost1", "ghost2")
        client.rpush(prefix + "queue", "ghost3")
        client.hset(prefix + "callers", "c", "ghost4")
        now_ms = int(client.time()[0]) * 1000
        client.zadd(prefix + "procs", {"ghost-proc": now_ms + 10**9})
        client.hset(prefix + "terms", mapping={"ghost-proc": "{not json", "other": "[]"})
        first = asyncio.create_task(pool.run("k1", "c", held("K1", gate, calls)))
        await until(lambda: calls == ["K1"], 5, "k1 started at once (not queued)")
        second = asyncio.create_task(pool.run("k2", "d", held("K2", gate, calls)))
        await until(lambda: calls == ["K1", "K2"], 5, "k2 started at once too")
        assert readings(pool) == (2, 0)
        lease_end = client.zscore(prefix + "procs", "ghost-proc")
        assert lease_end is None or lease_end <= now_ms + 2000 + LEASE * 1000
        gate.set()
        assert await asyncio.gather(first, second) == ["K1", "K2"]
        await pool.stop()

    run(scenario)
    deadline = time.monotonic() + 2 * LEASE + 2.0  # the ghost process's lease, then its TTL
    while namespace_keys(redis_server.url, namespace):
        assert time.monotonic() < deadline, namespace_keys(redis_server.url, namespace)
        time.sleep(0.05)


def test_books_that_are_not_numbers_are_skipped(make_pool, redis_server, namespace):
    """The cluster's counters and durations with values no script writes: the snapshot
    (the status page's) skips them and the counting goes on."""
    pool = make_pool(1, 1, 5.0)
    prefix = "{" + namespace + "}:"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    gate = threading.Event()
    gate.set()

    async def scenario() -> None:
        assert await pool.run("a", "c", held("A", gate)) == "A"
        client.hset(prefix + "stats", mapping={"started": "lots", "since": "then", "x": "1"})
        client.lpush(prefix + "qwait", "slow")
        client.lpush(prefix + "runs", "1.5e3")
        snapshot = pool.snapshot()
        assert snapshot.scope == "cluster" and snapshot.counters.started == 0
        assert snapshot.queue_wait.count == 1  # the real one; "slow" skipped
        assert await pool.run("b", "c", held("B", gate)) == "B"
        assert pool.snapshot().counters.started == 1  # counted afresh

    run(scenario)


def test_the_status_page_answers_with_garbage_in_redis(
    pdfpool, admin_client, redis_server, namespace
):
    """The page (HTML and JSON) over a namespace holding a job whose every field is wrong,
    a waiter count of ``lots`` and books that are not numbers: 200, never 500."""
    from django_pdfpool import get_pool
    from tests.status.test_page import URL

    pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": LEASE})
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    prefix = "{" + namespace + "}:"
    client.sadd(prefix + "running", "bad", "worse")
    client.hset(prefix + "job:bad", mapping={"qt": "x", "st": "y", "w:p": "lots", "state": "1"})
    client.hset(prefix + "job:worse", mapping={"qt": "1", "state": "running", "w:p": "lots"})
    client.zadd(prefix + "procs", {"not-a-process": 1e18, "host:²:tag": 1e18})  # not int("²")
    client.hset(prefix + "stats", mapping={"started": "lots"})
    client.rpush(prefix + "qwait", "soon")
    try:
        assert admin_client.get(URL).status_code == 200
        response = admin_client.get(URL, {"format": "json"})
        assert response.status_code == 200
        assert response.json()["cluster"]["mode"] == "redis"
        assert get_pool().waiting("worse") == 0
    finally:
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)
