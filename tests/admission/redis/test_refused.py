"""Redis that answers but refuses the pool's writes (out of memory under ``noeviction``, a
read-only replica, an ACL without the rights) is not "Redis unreachable": it is reported and
counted apart, the caller is told so (503, ``CoordinatorUnavailable``), the status page says
so, and the pool does not flap between 503 and 200 while it lasts (a PING answers; the
probe writes). When Redis takes writes again, the pool is coordinated again within seconds.

Each test has a real redis-server of its own, reconfigured under the pool (CONFIG SET,
REPLICAOF, ACL SETUSER).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.exceptions import CoordinatorUnavailable
from tests.support.redis_server import LEASE, RedisServer, free_port

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(60)

BACK = 5.0  # seconds for the pool to be coordinated again once Redis takes writes


async def answer() -> str:
    return "done"


def admin(server: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)


def out_of_memory(server: RedisServer) -> Callable[[], None]:
    client = admin(server)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")
    return lambda: client.config_set("maxmemory", "0")


def read_only(server: RedisServer) -> Callable[[], None]:
    client = admin(server)
    client.replicaof("127.0.0.1", str(free_port()))  # a primary that is not there
    return lambda: client.replicaof("no", "one")


def no_permission(server: RedisServer) -> Callable[[], None]:
    """The default user loses the right to write hashes (what every script does)."""
    client = admin(server)
    client.execute_command("ACL", "SETUSER", "default", "-hset")
    return lambda: client.execute_command("ACL", "SETUSER", "default", "+hset")


REFUSALS = {"out of memory": out_of_memory, "read-only": read_only, "no permission": no_permission}
SAID = {"out of memory": "maxmemory", "read-only": "read only", "no permission": "can't run"}


@pytest.fixture
def pool(own_redis: RedisServer) -> Iterator[RedisPool]:
    made = RedisPool(1, 1, 5.0, url=own_redis.url, namespace="refused", lease=LEASE)
    yield made
    asyncio.run(asyncio.wait_for(made.stop(), 10))


def outcomes(pool: RedisPool, n: int, pause: float) -> list[Any]:
    """``n`` calls, ``pause`` s apart: each call's result, or its error."""

    async def calls() -> list[Any]:
        found = []
        for i in range(n):
            try:
                found.append(await pool.run(f"k{i}", "c", answer))
            except Exception as error:
                found.append(error)
            await asyncio.sleep(pause)
        return found

    return asyncio.run(asyncio.wait_for(calls(), 30))


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_refused_writes_are_told_apart_from_unreachable(own_redis, pool, refusal):
    assert outcomes(pool, 1, 0) == ["done"]  # coordinated, connections made
    restore = REFUSALS[refusal](own_redis)
    try:
        # for longer than two probes: every call refused, none let through (no flapping)
        got = outcomes(pool, 12, 0.2)
        assert all(isinstance(error, CoordinatorUnavailable) for error in got), got
        assert all("does not take new work" in str(error) for error in got), got[0]
        assert not any("cannot reach" in str(error) for error in got)
        cluster = pool.cluster_snapshot()
        assert (pool.mode, cluster.trouble) == ("refusing", "refused")
        assert (cluster.refused_writes, cluster.unreachable) == (1, 0)
        assert SAID[refusal] in cluster.redis_error
    finally:
        restore()
    deadline = time.monotonic() + BACK
    while pool.mode != "redis":
        assert time.monotonic() < deadline, "not coordinated again once writes are taken"
        time.sleep(0.02)
    assert outcomes(pool, 1, 0) == ["done"]
    assert pool.cluster_snapshot().trouble is None


def test_unreachable_is_counted_as_unreachable(own_redis, pool):
    assert outcomes(pool, 1, 0) == ["done"]
    own_redis.kill()
    try:
        (error,) = outcomes(pool, 1, 0)
        assert isinstance(error, CoordinatorUnavailable) and "cannot reach" in str(error)
        cluster = pool.cluster_snapshot()
        assert (cluster.trouble, cluster.unreachable, cluster.refused_writes) == (
            "unreachable",
            1,
            0,
        )
    finally:
        own_redis.start()


def test_the_status_page_says_redis_refuses_writes(pdfpool, admin_client, own_redis):
    from django_pdfpool import get_pool
    from tests.status.test_page import URL

    pdfpool(REDIS={"URL": own_redis.url, "NAMESPACE": "page-refused", "LEASE": LEASE})
    pool = get_pool()
    assert outcomes(pool, 1, 0) == ["done"]  # type: ignore[arg-type]
    restore = out_of_memory(own_redis)
    try:
        outcomes(pool, 1, 0)  # type: ignore[arg-type]
        data = admin_client.get(URL, {"format": "json"}).json()["cluster"]
        assert (data["mode"], data["trouble"], data["refused_writes"]) == ("refusing", "refused", 1)
        page = admin_client.get(URL).content.decode()
        assert (
            "Redis refuses this pool&#x27;s writes" in page or "Redis refuses this pool's" in page
        )
        assert "refuses its writes" in page
    finally:
        restore()
