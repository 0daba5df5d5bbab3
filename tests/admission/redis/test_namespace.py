"""One namespace, one set of terms: processes with other limits, lease, fingerprint or
deployment on one namespace are refused, never merged; the same terms share it."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.admission.jobs import queue_full
from django_pdfpool.exceptions import PoolMisconfigured, Refused
from tests.conftest import held, until
from tests.support.redis_terms import run

pytest_plugins = ["tests.support.redis_fixtures"]


pytestmark = pytest.mark.timeout(60)


def _first_holds_then(first: RedisPool, second: RedisPool):
    """Run a job in ``first`` (registered, holding a slot); ``second`` tries its own."""
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(first.run("a", "c1", held("A", gate)))
        while first.running() < 1:
            await asyncio.sleep(0.002)
        errors = []
        for key in ("a", "b"):  # joining is refused too: results are never shared
            with pytest.raises(Refused) as refused:
                await second.run(key, "c1", held("B", gate))
            errors.append(refused.value)
        gate.set()
        assert await running == "A"
        return errors

    return run(scenario)


def _admins_of_two_deployments(first: RedisPool, second: RedisPool) -> BaseException | str:
    """Deployment A's admin (caller "1") runs a slow job; deployment B's admin, also
    caller "1" in a database of its own, uploads another file: what B's admin gets."""
    gate = threading.Event()

    async def scenario():
        slow = asyncio.create_task(first.run("a-file", "1", held("A", gate)))
        while first.running() < 1:
            await asyncio.sleep(0.002)
        try:
            return await second.run("b-file", "1", held("B", gate))
        except Refused as refused:
            return refused
        finally:
            gate.set()
            assert await slow == "A"
            await asyncio.gather(first.stop(), second.stop())  # both leave the namespace

    return run(scenario)


def test_other_limits_on_one_namespace_are_refused_loudly(make_pool, namespace, caplog):
    caplog.set_level(logging.ERROR, logger="django_pdfpool.redis")
    first, second = make_pool(2, 4, 10.0), make_pool(3, 4, 5.0)
    errors = _first_holds_then(first, second)
    for error in errors:
        assert isinstance(error, PoolMisconfigured) and error.code == "misconfigured"
        assert repr(namespace) in str(error)
        assert "slots 3 here, 2 there" in str(error) and "wait 5 s here, 10 s there" in str(error)
        assert "queue" not in str(error) and error.retry_after > 0
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(logged) == 1 and namespace in logged[0].getMessage()  # once per process


def test_a_refusal_for_other_settings_counts_as_misconfigured_not_as_busy(make_pool):
    """A deployment error is not overload: each refused call counts in
    refused_misconfigured (the metrics' reason "misconfigured"), none in refused_busy."""
    first, second = make_pool(2, 4, 10.0), make_pool(3, 4, 10.0)
    errors = _first_holds_then(first, second)
    mine, cluster = second.local_snapshot().counters, first.snapshot().counters
    assert (mine.refused_misconfigured, mine.refused_busy) == (len(errors), 0)
    assert cluster.refused_busy == 0  # the live deployment's books are not the newcomer's


def test_another_fingerprint_on_one_namespace_is_refused(make_pool):
    first = make_pool(2, 4, 10.0, fingerprint="engine=pypdf;max_pages=None")
    second = make_pool(2, 4, 10.0, fingerprint="engine=pypdf;max_pages=1")
    for error in _first_holds_then(first, second):
        assert isinstance(error, PoolMisconfigured)
        assert "fingerprint" in str(error) and "max_pages" not in str(error)


def test_other_lease_is_refused(make_pool):
    first, second = make_pool(2, 4, 10.0, lease=1.0), make_pool(2, 4, 10.0, lease=2.0)
    (error, _) = _first_holds_then(first, second)
    assert "lease 2 s here, 1 s there" in str(error)


def test_the_same_terms_share_a_namespace_and_its_jobs(make_pool):
    first = make_pool(2, 4, 10.0, fingerprint="f")
    second = make_pool(2, 4, 10.0, fingerprint="f")
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(first.run("a", "c1", held("A", gate)))
        while first.running() < 1:
            await asyncio.sleep(0.002)
        joined = asyncio.create_task(second.run("a", "c2", held("X", gate)))
        while second.waiting("a") < 1:
            await asyncio.sleep(0.002)
        gate.set()
        assert await running == await joined == "A"
        assert await second.run("b", "c2", held("B", gate)) == "B"

    run(scenario)


def test_other_terms_are_fine_once_the_namespace_is_left(make_pool, namespace):
    first, second = make_pool(2), make_pool(3)
    gate = threading.Event()
    gate.set()

    async def scenario():
        assert await first.run("a", "c1", held("A", gate)) == "A"
        await first.stop()  # the first deployment is gone: its terms with it
        assert await second.run("a", "c1", held("B", gate)) == "B"

    run(scenario)


def test_a_client_is_never_told_the_deployment_details_of_a_misconfigured_pool(rf):
    from django_pdfpool.responses import error_answer

    error = PoolMisconfigured("the namespace 'prod-pdf' has slots 3 here, 2 there", 5.0)
    for accept in ("application/json", "text/html"):
        response = error_answer(rf.post("/upload/", HTTP_ACCEPT=accept), error)
        body = response.content.decode()
        assert response.status_code == 503 and "misconfigured" in body
        assert "prod-pdf" not in body and "slots" not in body


def test_two_deployments_sharing_the_defaults_are_refused_not_merged(make_pool, caplog):
    """The issue's report: with the layer off (one deployment tag for both, as before), B's
    admin gets A's caller_busy (429); with a tag per deployment, B is refused as
    misconfigured, loudly, and never shares A's slots, callers or results."""
    caplog.set_level(logging.ERROR, logger="django_pdfpool.redis")
    merged = _admins_of_two_deployments(make_pool(deployment=""), make_pool(deployment=""))
    assert type(merged).__name__ == "CallerBusy"  # the attack, with the layer off
    apart = _admins_of_two_deployments(make_pool(deployment="A"), make_pool(deployment="B"))
    assert isinstance(apart, PoolMisconfigured) and apart.code == "misconfigured"
    assert "Another deployment uses the Redis namespace" in str(apart)
    assert "SECRET_KEY" in str(apart) and "NAMESPACE" in str(apart)
    assert any("Another deployment" in r.getMessage() for r in caplog.records)


def test_the_same_deployment_shares_its_namespace(make_pool):
    gate = threading.Event()
    first, second = make_pool(deployment="A"), make_pool(deployment="A")

    async def scenario():
        running = asyncio.create_task(first.run("k", "c1", held("K", gate)))
        while first.running() < 1:
            await asyncio.sleep(0.002)
        joined = asyncio.create_task(second.run("k", "c2", None))
        while second.waiting("k") < 1:
            await asyncio.sleep(0.002)
        gate.set()
        assert await running == await joined == "K"

    run(scenario)


def test_the_deployment_tag_comes_from_the_secret_key_without_showing_it(settings):
    from django_pdfpool.conf import get_settings

    settings.PDFPOOL = {}
    settings.SECRET_KEY = "first-deployment-secret-key-" + "x" * 30
    first = get_settings().deployment_tag()
    settings.SECRET_KEY = "second-deployment-secret-key-" + "y" * 30
    get_settings.cache_clear()
    second = get_settings().deployment_tag()
    assert first != second and len(first) == len(second) == 32
    assert "secret" not in first and "x" * 6 not in first
    # an explicit name: the key may rotate
    settings.PDFPOOL = {"REDIS": {"URL": "redis://h/0", "DEPLOYMENT": "shop"}}
    named = get_settings().deployment_tag()
    settings.SECRET_KEY = "third-deployment-secret-key-" + "z" * 30
    get_settings.cache_clear()
    assert get_settings().deployment_tag() == named not in (first, second)


@pytest.mark.parametrize(
    ("value", "warned"),
    [
        ({"REDIS": {"URL": "redis://h/0"}}, True),
        ({"REDIS": {"URL": "redis://h/0", "NAMESPACE": "pdfpool"}}, True),
        ({"REDIS": {"URL": "redis://h/0", "NAMESPACE": "shop-pdf"}}, False),
        ({}, False),  # the local pool: no Redis to share
    ],
)
def test_a_check_warns_of_the_default_namespace_with_redis(settings, value, warned):
    from django_pdfpool.checks import check_redis_namespace

    settings.PDFPOOL = value
    found = [message.id for message in check_redis_namespace()]
    assert found == (["django_pdfpool.W001"] if warned else [])


@pytest.mark.parametrize("terms", [{"slots": 2}, {"lease": 0.2}], ids=["slots", "lease"])
def test_a_refused_process_changes_nothing_for_the_live_ones(make_pool, redis_server, terms):
    """A process with other terms is refused, and its calls run none of the namespace's
    steps under its terms: no queued job starts on a slot its SLOTS would count, no live
    lease is cut short to its LEASE (the live processes would be reaped while they run)."""
    lease = 6.0
    here, other = make_pool(1, 1, 10.0, lease=lease), make_pool(1, 1, 10.0, lease=lease)
    foreign = make_pool(**{"slots": 1, "queue": 1, "wait": 10.0, "lease": lease, **terms})
    gate = threading.Event()
    prefix = "{" + here.namespace + "}:"

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        queued = asyncio.create_task(other.run("j", "b", held("J", gate)))
        await until(lambda: other.queued() == 1)
        with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:

            def unchanged() -> None:
                assert client.smembers(prefix + "running") == {"k"}
                now = float(client.time()[0])
                for pool in (here, other):
                    assert client.zscore(prefix + "procs", pool.process) / 1000 > now + lease / 3

            foreign.count_refusal(queue_full(1.0))  # its door's refusal, counted
            await until(lambda: client.hget(prefix + "stats", "refused_busy") == "1")
            unchanged()
            with pytest.raises(PoolMisconfigured):
                await foreign.run("x", "c", held("X", gate))
            unchanged()
            await foreign.stop()  # leaving
            unchanged()
        gate.set()
        assert await asyncio.gather(running, queued) == ["K", "J"]

    run(scenario)
