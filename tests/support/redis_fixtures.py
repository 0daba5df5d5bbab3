"""Pytest fixtures for the Redis tests: ``pytest_plugins = ["tests.support.redis_fixtures"]``.

``redis_server`` is one server for the session; ``own_redis`` a server for one test
(to kill and restart it); ``sentinel_set`` a primary, its replica and a redis-sentinel.
``make_pool`` builds ``RedisPool``s in a fresh namespace,
stops them afterwards and then checks that the namespace left no key in Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from uuid import uuid4

import pytest

from django_pdfpool.admission import RedisPool
from tests.support.redis_server import (
    RedisServer,
    SentinelSet,
    available,
    namespace_keys,
    pools_in,
    sentinel_available,
)


def _server() -> RedisServer:
    if not available():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return RedisServer().start()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = _server()
    yield server
    server.stop()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of this test's own, to kill and restart."""
    server = _server()
    yield server
    server.stop()


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid4().hex[:12]}"


@pytest.fixture
def make_pool(redis_server: RedisServer, namespace: str) -> Iterator[Callable[..., RedisPool]]:
    """``make_pool(slots, queue, wait, **options)``: pools sharing this test's namespace,
    like processes sharing a Redis. Afterwards every pool is stopped, and no key of
    the namespace may be left."""
    make, made = pools_in(redis_server, namespace)
    yield make

    async def stop_all() -> None:
        await asyncio.gather(*(pool.stop() for pool in made))

    asyncio.run(asyncio.wait_for(stop_all(), 10))
    assert namespace_keys(redis_server.url, namespace) == []


@pytest.fixture
def sentinel_set() -> Iterator[SentinelSet]:
    if not (available() and sentinel_available()):
        pytest.skip(
            "redis-sentinel is not installed beside redis-server (apt-get install redis-sentinel)"
        )
    watched = SentinelSet().start()
    yield watched
    watched.stop()
