"""What each pool tells the door before a body is read (``pressure()``), local and Redis."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from django_pdfpool.admission.ledger import Pressure
from django_pdfpool.admission.local import Pool
from django_pdfpool.exceptions import (
    PoolBusy,
)
from tests import test_door as door_grid
from tests.conftest import held, held_requests, until, wait_until
from tests.project.views import HELD
from tests.support.door import answer_of, asgi_post

pytest_plugins = ["tests.support.redis_fixtures"]


def check_pressure(pool) -> None:
    """One slot, one queue place: free places, the key in flight, closed; a door refusal
    counted in the pool's counters."""
    gate = threading.Event()

    async def scenario():
        assert pool.pressure("k1") == Pressure(False, 2, False, pool.pressure().retry_after)
        running = asyncio.ensure_future(pool.run("k1", "c1", held("r1", gate)))
        await until(lambda: pool.running() == 1)
        after_one = pool.pressure("k1")
        assert (after_one.free, after_one.in_flight) == (1, True)
        assert pool.pressure("k2").in_flight is False
        queued = asyncio.ensure_future(pool.run("k2", "c2", held("r2", gate)))
        await until(lambda: pool.queued() == 1)
        full = pool.pressure(None)
        assert full.free == 0 and full.retry_after > 0
        assert pool.pressure("k3", "c1").caller_busy  # c1 holds k1: 429 for another key
        assert pool.pressure(None, "c1").caller_busy
        assert not pool.pressure("k1", "c1").caller_busy  # its own key: it joins
        assert not pool.pressure("k2", "c1").caller_busy  # a job in flight: it joins too
        assert not pool.pressure("k3", "c9").caller_busy and not pool.pressure("k3").caller_busy
        assert pool.pressure("k3", "c1").caller_retry_after > 0
        pool.count_refusal(PoolBusy("at the door"))
        await until(lambda: pool.snapshot().counters.refused_busy == 1)  # Redis: soon
        gate.set()
        assert await running == "r1" and await queued == "r2"
        pool.close()
        assert pool.pressure().closed

    asyncio.run(scenario())


def test_the_local_pool_tells_the_door_its_pressure():
    check_pressure(Pool(1, 1, 10.0))


def test_the_redis_pool_tells_the_door_the_clusters_pressure(make_pool):
    pool = make_pool(1, 1, 10.0)
    assert pool.blocking_reads
    check_pressure(pool)


def check_sizes(pool) -> None:
    """The door proves from sizes what cannot join: the pool says how large each job in
    flight is, or nothing when one job's size is unknown."""
    gate = threading.Event()

    async def scenario():
        first = asyncio.ensure_future(pool.run("k1", "c1", held("r1", gate), size=2_800_000))
        await until(lambda: pool.running() == 1)
        assert pool.pressure().sizes == (2_800_000,)
        joined = asyncio.ensure_future(pool.run("k1", "c2", None, size=5))
        await until(lambda: pool.waiting("k1") == 1)
        assert pool.pressure().sizes == (2_800_000,)  # a sharer's size is not the job's
        unsized = asyncio.ensure_future(pool.run("k2", "c3", held("r2", gate)))
        await until(lambda: pool.running() == 2)
        assert pool.pressure().sizes is None  # one job's size unknown: no proof
        gate.set()
        assert await first == await joined == "r1" and await unsized == "r2"

    asyncio.run(scenario())


def test_the_local_pool_tells_the_door_the_sizes_of_its_jobs():
    check_sizes(Pool(2, 0, 10.0))


def test_the_redis_pool_tells_the_door_the_sizes_of_the_clusters_jobs(make_pool):
    check_sizes(make_pool(2, 0, 10.0))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", door_grid.FOUND + door_grid.GRID[:24], ids="-".join)
def test_the_door_on_a_redis_pool_answers_as_the_pool_with_the_door_off(
    pdfpool, settings, redis_server, namespace, case
):
    """tests/test_door.py's grid, with the one slot held in a Redis pool: the door reads the
    cluster's pressure (off the loop) and answers as the decorator does without it."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor, get_pool

    stack, kind, digest, cookie, extra, length = case
    body, content_type = door_grid.BODIES[kind]
    sent = [(b"content-type", content_type.encode())] if content_type else []
    sent += door_grid.DIGESTS[digest] + door_grid.COOKIES[cookie] + door_grid.EXTRAS[extra]
    if length == "length":
        sent.append((b"content-length", b"%d" % len(body)))
    else:  # an HTTP/1.1 body framed by neither is empty: chunks, as a server passes them on
        sent.append((b"transfer-encoding", b"chunked"))
    request = {**asgi_post("/held/async/", body), "client": ("10.1.2.3", 5000)}
    request["headers"] = [(b"host", b"testserver"), *sent]
    redis = {"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": 2.0}
    answers = []
    for door in (False, True):
        pdfpool(MAX_UPLOAD_SIZE=4096, DOOR=door, SLOTS=1, QUEUE=0, REDIS=redis)
        settings.MIDDLEWARE = door_grid.STACKS["plain"]  # theirs is let in
        HELD.reset()
        with held_requests(1) as threads:
            theirs = asgi_post("/held/async/", door_grid.THEIRS)
            app = PdfPoolDoor(get_asgi_application())
            threads.submit(asyncio.run, answer_of(app, theirs, door_grid.THEIRS))
            wait_until(lambda: get_pool().running() == 1)
            settings.MIDDLEWARE = door_grid.STACKS[stack]
            status, page, headers = asyncio.run(
                answer_of(PdfPoolDoor(get_asgi_application()), request, body)
            )
        code = json.loads(page).get("code") if page.startswith(b"{") else None
        answers.append((status, headers.get(b"Location"), code))
        wait_until(lambda: get_pool().running() == 0)
    assert answers[1] == answers[0]
