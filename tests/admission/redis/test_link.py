"""The ways production reaches Redis, each against the real thing: TLS (``rediss://``, a
redis-server serving TLS only with a self-signed certificate made by the test), an ACL user
(``redis://user:password@``, limited to the namespace as docs/cluster.md says), and Sentinel
(a real redis-sentinel watching a primary and its replica: the primary is killed, the
replica takes over, and the pool's limits hold across the failover)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.exceptions import CoordinatorUnavailable
from tests.support.redis_server import (
    LEASE,
    RedisServer,
    available,
    namespace_keys,
)

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(90)

FAILOVER = 10.0  # seconds: Sentinel's down-after (0.5 s), its election, the pool's probe (1 s)


def run(scenario: Callable[[], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 60))


async def until(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.01)


class Jobs:
    """Held jobs that count how many of them run at once, across every pool here."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.running = self.most = 0
        self.ran: list[str] = []

    def job(self, value: str) -> Callable[[], Any]:
        async def fn() -> str:
            self.running += 1  # on the one job loop: no lock needed
            self.most = max(self.most, self.running)
            self.ran.append(value)
            try:
                while not self.gate.is_set():
                    await asyncio.sleep(0.002)
                return value
            finally:
                self.running -= 1

        return fn


def shared_job_across(first: RedisPool, second: RedisPool) -> None:
    """The rules across two pools over this connection: one job, shared; a second caller
    queued behind the single slot; both answered."""
    jobs = Jobs()

    async def scenario() -> None:
        own = asyncio.create_task(first.run("k1", "a", jobs.job("K1")))
        await until(lambda: first.running() == 1, 10, "k1 running")
        shared = asyncio.create_task(second.run("k1", "b", jobs.job("again")))
        await until(lambda: first.waiting("k1") == 1, 10, "k1 shared")
        queued = asyncio.create_task(second.run("k2", "c", jobs.job("K2")))
        await until(lambda: second.queued() == 1, 10, "k2 queued")
        assert first.cluster_snapshot().mode == "redis"
        jobs.gate.set()
        assert await asyncio.gather(own, shared, queued) == ["K1", "K1", "K2"]
        assert jobs.ran == ["K1", "K2"] and jobs.most == 1

    run(scenario)


def stopped(*pools: RedisPool) -> None:
    async def stop() -> None:
        await asyncio.gather(*(pool.stop() for pool in pools))

    asyncio.run(asyncio.wait_for(stop(), 15))


# --- TLS ---------------------------------------------------------------------------------


@pytest.fixture
def tls_redis() -> Iterator[RedisServer]:
    if not available():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(tls=True).start()
    yield server
    server.stop()


def test_rediss_with_a_ca_certificate(tls_redis):
    """``rediss://host:port/0?ssl_ca_certs=...``: every connection (scripts, the channel,
    the readings) over TLS, the server's certificate checked against the CA given."""
    assert tls_redis.url.startswith("rediss://")
    pools = [
        RedisPool(1, 2, 10.0, url=tls_redis.url, namespace="tls", lease=LEASE) for _ in range(2)
    ]
    try:
        shared_job_across(*pools)
    finally:
        stopped(*pools)
    assert namespace_keys(tls_redis.url, "tls") == []


def test_tls_without_the_ca_is_refused_and_said(tls_redis):
    """The certificate is checked: without its CA the pool does not coordinate (503), and
    plain ``redis://`` to the TLS port does not either."""
    untrusted = f"rediss://127.0.0.1:{tls_redis.port}/0"
    plain = f"redis://127.0.0.1:{tls_redis.port}/0"
    for url in (untrusted, plain):
        pool = RedisPool(1, 1, 5.0, url=url, namespace="tls-bad", lease=LEASE, timeout=0.5)
        try:

            async def call(pool: RedisPool = pool) -> None:
                await pool.run("k", "c", Jobs().job("never"))

            with pytest.raises(CoordinatorUnavailable):
                run(call)
            assert pool.mode == "refusing" and pool.cluster_snapshot().redis_error
        finally:
            stopped(pool)


# --- an ACL user -----------------------------------------------------------------------


ACL_RIGHTS = ("-@all", "+@read", "+@write", "+@scripting", "+@pubsub", "+ping", "+time")


def acl_user(server: RedisServer, name: str, password: str, namespace: str, *rights: str) -> str:
    """An ACL user limited to the namespace's keys and channels; the pool's URL for it."""
    with server.client() as admin:
        admin.execute_command(
            "ACL", "SETUSER", name, "on", f">{password}", "resetkeys", f"~{{{namespace}}}:*",
            "resetchannels", f"&{{{namespace}}}:*", *rights,
        )  # fmt: skip
    return f"redis://{name}:{quote(password)}@127.0.0.1:{server.port}/0"


def test_an_acl_user_with_the_documented_rights(own_redis):
    url = acl_user(own_redis, "pdfpool", "p@ss word", "acl", *ACL_RIGHTS)
    with redis.Redis.from_url(url) as client, pytest.raises(redis.exceptions.NoPermissionError):
        client.set("another-app:key", 1)  # the user is limited to the namespace
    pools = [RedisPool(1, 2, 10.0, url=url, namespace="acl", lease=LEASE) for _ in range(2)]
    try:
        shared_job_across(*pools)
        with redis.Redis.from_url(url, decode_responses=True) as client:
            found = list(client.scan_iter(match="{acl}:*"))  # SCAN, within its rights
        assert all(key.startswith("{acl}:") for key in found)
    finally:
        stopped(*pools)
    assert "p@ss" not in repr(pools[0]) and ":***@" in pools[0].cluster_snapshot().url


@pytest.mark.parametrize(
    ("password", "rights", "said"),
    [
        ("wrong", ACL_RIGHTS, "AuthenticationError"),
        ("right", tuple(r for r in ACL_RIGHTS if r != "+@scripting"), "NOPERM"),
    ],
    ids=["wrong password", "no scripting"],
)
def test_an_acl_user_refused_is_told_as_refused(own_redis, password, rights, said):
    url = acl_user(own_redis, "limited", "right", "acl2", *rights)
    url = url.replace(":right@", f":{password}@")
    pool = RedisPool(1, 1, 5.0, url=url, namespace="acl2", lease=LEASE)
    try:

        async def call() -> None:
            await pool.run("k", "c", Jobs().job("never"))

        with pytest.raises(CoordinatorUnavailable, match="does not take new work"):
            run(call)
        cluster = pool.cluster_snapshot()
        assert (cluster.trouble, cluster.refused_writes) == ("refused", 1)
        assert said.lower() in cluster.redis_error.lower() or "permission" in cluster.redis_error
    finally:
        stopped(pool)


# --- Sentinel ----------------------------------------------------------------------------


def test_through_sentinel_the_limits_hold_across_a_failover(sentinel_set):
    """Pools find the primary through the Sentinel. A runs k1 (the only slot), B shares it;
    the primary is SIGKILLed; the Sentinel promotes the replica. Within the documented
    bound (docs/cluster.md: the fallback while no primary answers, then one beat), the
    pools coordinate again through the new primary, k1 is counted there (its owner's beat),
    a new job queues behind it instead of running beside it, and every caller is answered:
    k1's own caller with its result, its sharer elsewhere with the result or a 503
    refusal (RunnerLost / CoordinatorUnavailable: what the docs allow to be lost)."""
    url, sentinels = sentinel_set.url, sentinel_set.sentinels
    a, b = (
        RedisPool(1, 2, 10.0, url=url, namespace="ha", lease=LEASE, sentinels=sentinels)
        for _ in range(2)
    )
    jobs = Jobs()

    async def scenario() -> list[Any]:
        own = asyncio.create_task(a.run("k1", "a", jobs.job("K1")))
        await until(lambda: a.running() == 1, 10, "k1 running")
        sharer = asyncio.create_task(b.run("k1", "b", None))
        await until(lambda: a.waiting("k1") == 1, 10, "k1 shared")
        assert sentinel_set.replica is not None
        old, new = sentinel_set.primary.port, sentinel_set.replica.port
        sentinel_set.primary.kill()
        await until(lambda: sentinel_set.primary_port() == new != old, FAILOVER, "failover")
        await until(lambda: a.mode == b.mode == "redis", FAILOVER, "coordinated again")
        await until(lambda: a.running() == 1, FAILOVER, "k1 counted on the new primary")
        queued = None
        deadline = time.monotonic() + FAILOVER
        while queued is None:  # a call made while B still falls back is refused (503)
            attempt = asyncio.create_task(b.run("k2", "c", jobs.job("K2")))
            await until(lambda t=attempt: t.done() or b.queued() == 1, 10, "k2 answered")
            if not attempt.done():
                queued = attempt
            else:
                assert isinstance(attempt.exception(), CoordinatorUnavailable)
                assert time.monotonic() < deadline, "k2 never queued after the failover"
                await asyncio.sleep(0.1)
        assert jobs.ran == ["K1"]  # k2 waits for the slot k1 holds
        jobs.gate.set()
        return await asyncio.gather(own, sharer, queued, return_exceptions=True)

    try:
        own, shared, second = run(scenario)
    finally:
        stopped(a, b)
    assert (own, second) == ("K1", "K2")
    allowed = ("RunnerLost", "CoordinatorUnavailable")
    assert shared == "K1" or type(shared).__name__ in allowed, shared
    assert jobs.most == 1  # never two at once, however Redis changed hands
