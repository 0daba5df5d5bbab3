"""Draining the process's pool on shutdown: finish what runs and waits, refuse the new,
and stop what outlives the drain timeout."""

from __future__ import annotations

import asyncio

import pytest

from django_pdfpool import adrain_pool, drain_pool, get_pool
from django_pdfpool.configured import drain_timeout
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD
from tests.test_decorators import post

pytest_plugins = ["tests.support.redis_fixtures"]


@pytest.fixture(params=["local", "redis"])
def backend(request, pdfpool):
    """``pdfpool`` with the local pool, or with a Redis pool on a throwaway namespace."""

    def configure(**values):
        if request.param == "redis":
            server = request.getfixturevalue("redis_server")
            url, namespace = server.url, request.getfixturevalue("namespace")
            values["REDIS"] = {"URL": url, "NAMESPACE": namespace, "LEASE": 2.0}
        return pdfpool(**values)

    return configure


def test_drain_finishes_running_and_queued_then_refuses(backend):
    backend(SLOTS=1, QUEUE=1)
    with held_requests(4) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- a", "10.0.8.1")
        wait_until(lambda: get_pool().running() == 1)
        queued = threads.submit(post, "/held/sync/", b"%PDF- b", "10.0.8.2")
        wait_until(lambda: get_pool().queued() == 1)
        draining = threads.submit(drain_pool, 30)
        wait_until(lambda: get_pool().snapshot().closed)
        refused = threads.submit(post, "/held/sync/", b"%PDF- c", "10.0.8.3").result(30)
        assert not draining.done()
        HELD.release.set()
        assert draining.result(timeout=30) is True
        assert running.result(timeout=30).status_code == 200
        assert queued.result(timeout=30).status_code == 200
    assert refused.status_code == 503 and refused.json()["error"] == "closed"
    assert (get_pool().running(), get_pool().queued()) == (0, 0)


def test_a_drain_that_times_out_stops_what_is_left(backend):
    backend(SLOTS=1, QUEUE=1)
    with held_requests(2) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- a", "10.0.9.1")
        wait_until(lambda: get_pool().running() == 1)
        queued = threads.submit(post, "/held/sync/", b"%PDF- b", "10.0.9.2")
        wait_until(lambda: get_pool().queued() == 1)
        assert asyncio.run(adrain_pool(timeout=0.2)) is False  # held: never finishes
        first, second = running.result(timeout=30), queued.result(timeout=30)
    assert (first.status_code, second.status_code) == (503, 503)
    assert first.json()["error"] == second.json()["error"] == "closed"
    assert len(HELD.runs) == 1  # the queued one never ran
    assert (get_pool().running(), get_pool().queued()) == (0, 0)


def test_a_drain_with_jobs_in_flight_says_once_how_long_it_may_wait(pdfpool, caplog):
    """At exit a drain looks like a hung process: it says what it waits for (WARNING), and a
    drain with nothing in flight says nothing."""
    pdfpool(SLOTS=1, QUEUE=1)
    with caplog.at_level("WARNING", "django_pdfpool"), held_requests(1) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- a", "10.0.10.1")
        wait_until(lambda: get_pool().running() == 1)
        assert asyncio.run(adrain_pool(timeout=0.2)) is False  # held: never finishes
        assert running.result(timeout=30).status_code == 503
        assert asyncio.run(adrain_pool(timeout=30)) is True  # idle now: at once, and silent
    waits = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert waits == ["PDF pool: waiting at most 0.2 s for the jobs in flight to end"]


@pytest.mark.parametrize(("slots", "queue", "rounds"), [(1, 9, 9), (2, 3, 2), (2, 4, 2), (3, 0, 0)])
def test_the_default_drain_bound_waits_out_the_queue_when_wait_is_none(
    pdfpool, slots, queue, rounds
):
    """WAIT None: the last queued job waits for ``rounds`` of SLOTS jobs of TIMEOUT at most,
    then runs TIMEOUT; it is not stopped before (0 + TIMEOUT + 5 would stop it)."""
    pdfpool(SLOTS=slots, QUEUE=queue, WAIT=None, TIMEOUT=1.5)
    assert drain_timeout() == rounds * 1.5 + 1.5 + 5
    pdfpool(SLOTS=slots, QUEUE=queue, WAIT=2.0, TIMEOUT=1.5)
    assert drain_timeout() == 2.0 + 1.5 + 5  # a queued job waits WAIT at most


def test_drain_pool_refuses_to_run_on_an_event_loop(pdfpool):
    async def inside_a_loop():
        drain_pool(1)

    try:
        asyncio.run(inside_a_loop())
    except RuntimeError as error:
        assert "await adrain_pool" in str(error)
    else:
        raise AssertionError("drain_pool ran on an event loop")


def test_a_pool_handed_out_as_settings_change_still_serves_once_replaced(pdfpool):
    """The busy pool handed out after a settings change, then replaced once idle (its last
    job ended) before its caller ran: the call is served, not refused ``closed``."""
    pdfpool(SLOTS=1)
    with held_requests(1) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- a", "10.0.10.1")
        wait_until(lambda: get_pool().running() == 1)
        pdfpool(SLOTS=2)
        handed_out = get_pool()  # busy: kept until idle
        HELD.release.set()
        assert running.result(timeout=30).status_code == 200
        wait_until(handed_out.idle)
    assert get_pool() is not handed_out

    async def job() -> str:
        return "served"

    assert asyncio.run(handed_out.run("late", "10.0.10.2", job)) == "served"
