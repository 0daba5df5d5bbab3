"""A Redis pool's side of one process: what it keeps of a job once the job has ended, and
replies handled in another order than Redis ran their scripts."""

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
from tests.conftest import held, until, wait_until
from tests.support.outages import _answer, run
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


def test_a_queued_job_whose_join_answered_first_runs_when_redis_starts_it(redis_server, namespace):
    """A call queued; Redis gives its job the slot, then answers a join "running"; the join's
    reply is handled first: the job runs once its `start` is handled, both callers get its
    result (the record the join made said running, and the `start` was taken as done)."""
    proxy = HoldingProxy(redis_server.port)
    url = f"redis://127.0.0.1:{proxy.port}/0"
    pool = RedisPool(1, 2, None, url=url, namespace=namespace, lease=60.0, timeout=PATIENCE)
    gate, never = threading.Event(), threading.Event()  # no wait, no beat: nothing else moves

    async def scenario():
        assert await pool.run("w", "warm", _answer) == 42  # scripts loaded: no source sent again
        first = asyncio.create_task(pool.run("x", "c1", held("X", gate)))
        await until(lambda: pool.running() == 1)
        proxy.marker = b"queued"  # the next reply saying so: the queued call's, held
        queued = asyncio.create_task(pool.run("k", "c2", held("K", gate)))
        await until(proxy.held.is_set)
        gate.set()
        assert await first == "X"  # its finish gave "k" the slot: `start` came
        joined = asyncio.create_task(pool.run("k", "c3", held("never", never)))
        await until(lambda: any(job.key == "k" for job in pool._side.jobs()))  # the join's reply
        proxy.released.set()
        assert await asyncio.wait_for(queued, PATIENCE) == "K"
        assert await asyncio.wait_for(joined, PATIENCE) == "K"

    try:
        run(scenario)
    finally:
        never.set()
        proxy.released.set()
        run(lambda: asyncio.wait_for(pool.stop(), PATIENCE))  # a job never run: stop() waits
        proxy.close()


def test_a_call_reaching_the_job_loop_after_stop_began_is_refused_as_pool_refuses_it(
    make_pool, monkeypatch
):
    """A call past run()'s closed-check whose admission reaches the job loop after stop()
    cancelled this process's jobs is refused (PoolClosed), as Pool's rule 0 refuses it
    under its lock: never admitted, run to its end, and waited for by stop()."""
    from django_pdfpool.admission.redis import redis_pool

    pool = make_pool(2, 4, 10.0)
    cancelled, ended, ran = threading.Event(), threading.Event(), []

    async def lingering() -> None:  # ends a while after its cancel, as a child being killed
        try:
            await asyncio.sleep(2 * PATIENCE)
        except asyncio.CancelledError:
            cancelled.set()
            while not ended.is_set():
                await asyncio.sleep(0.01)
            raise

    async def late() -> str:
        ran.append(True)
        return "ran"

    first = threading.Thread(
        target=lambda: _refused(pool.run("k:" + "a" * 64, "ip:192.0.2.1", lingering))
    )
    first.start()
    stopper = threading.Thread(target=lambda: asyncio.run(pool.stop()))
    real = redis_pool.call_in_job_loop

    def after_stop_began(callback, *args):  # the caller's thread loses the CPU here
        if callback == pool._side.begin:
            stopper.start()
            assert cancelled.wait(PATIENCE), "stop() did not cancel the running job"
        real(callback, *args)

    try:
        wait_until(lambda: pool.running() == 1, PATIENCE)
        monkeypatch.setattr(redis_pool, "call_in_job_loop", after_stop_began)
        _refused(pool.run("k:" + "b" * 64, "ip:192.0.2.2", late))
    finally:
        ended.set()
        first.join(PATIENCE)
        if stopper.ident is not None:
            stopper.join(PATIENCE)
    assert ran == [] and not stopper.is_alive()


def _refused(call) -> None:
    """Run ``call`` to its refusal (the pool stops under it)."""
    from django_pdfpool.exceptions import PoolClosed

    with pytest.raises(PoolClosed):
        asyncio.run(asyncio.wait_for(call, 2 * PATIENCE))
