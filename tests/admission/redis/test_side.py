"""A Redis pool's side of one process: what it keeps of a job once the job has ended."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import threading
import time
import weakref

import pytest

from django_pdfpool.admission import RedisPool
from django_pdfpool.admission.redis.link import SOURCES
from tests.conftest import held, until
from tests.support.outages import run
from tests.support.redis_proxy import HoldingProxy
from tests.support.redis_server import LEASE

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(60)

PATIENCE = 10.0  # seconds: "did not hang", on a busy 2-core machine


class Result:
    """A job's result, large in real life (an Extraction of 8 MiB of text)."""


def test_a_result_is_not_kept_for_an_admission_that_cannot_join_its_job(redis_server, namespace):
    """A call of another key admitted (on a slow link) while a job ends cannot be a join
    whose reply comes after that end: the result is let go once its callers have it."""
    proxy = HoldingProxy(redis_server.port)
    url = f"redis://127.0.0.1:{proxy.port}/0"
    pool = RedisPool(2, 2, 10.0, url=url, namespace=namespace, lease=LEASE, timeout=PATIENCE)
    gate, made = threading.Event(), []

    async def job() -> Result:
        while not gate.is_set():
            await asyncio.sleep(0.002)
        result = Result()
        made.append(weakref.ref(result))
        return result

    def let_go() -> bool:
        gc.collect()
        return made[0]() is None

    async def scenario():
        running = asyncio.create_task(pool.run("a", "first", job))
        await until(lambda: pool.running() == 1)
        proxy.marker = hashlib.sha1(SOURCES["admit"].encode()).hexdigest().encode()
        other = asyncio.create_task(pool.run("b", "second", held("B", gate)))
        await until(proxy.held.is_set)  # its admission on its way
        gate.set()
        assert isinstance(await running, Result)
        del running
        deadline = time.monotonic() + 2.0
        while not let_go() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert made[0]() is None, "kept while another key's admission is on its way"
        proxy.released.set()
        assert await asyncio.wait_for(other, PATIENCE) == "B"

    try:
        run(scenario)
    finally:
        proxy.released.set()
        run(pool.stop)
        proxy.close()
