"""What a job or a user's hook can raise, against both pools: a hook raising SystemExit or
KeyboardInterrupt is contained, a CancelledError nobody asked for is a failure every sharer sees,
and stop still cancels a running job."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from uuid import uuid4

import pytest

from django_pdfpool.admission import Pool
from django_pdfpool.exceptions import JobFault, PoolBusy
from tests.conftest import held, until
from tests.support.outages import _answer, run

pytest_plugins = ["tests.support.redis_fixtures"]


pytestmark = pytest.mark.timeout(90)


@pytest.fixture(params=["local", "redis"])
def pool_of(request) -> Iterator[Callable[..., object]]:
    """``pool_of(slots, queue, wait, on_error=...)``: a local Pool, or a RedisPool on the
    session's redis-server in a namespace of this test's own."""
    if request.param == "local":
        made: list[Pool] = []

        def local(*args, **options):
            made.append(Pool(*args, **options))
            return made[-1]

        yield local
        return
    yield request.getfixturevalue("make_pool")


async def still_runs(pool) -> None:
    """The job loop is alive: a new job runs and answers."""
    assert await asyncio.wait_for(pool.run(f"alive-{uuid4().hex}", "alive", _answer), 10) == 42
    await until(lambda: pool.running() == 0)


@pytest.mark.parametrize("escape", [SystemExit, KeyboardInterrupt])
def test_an_on_error_observer_raising_base_exception_is_contained(pool_of, escape, caplog):
    seen = []

    def observer(key, error):
        seen.append(key)
        raise escape("from the observer")

    pool = pool_of(1, 1, 5.0, on_error=observer)

    async def fails():
        raise ValueError("the job failed")

    async def scenario():
        with pytest.raises(ValueError):
            await pool.run("k", "c", fails)
        await until(lambda: seen == ["k"])
        await still_runs(pool)

    run(scenario)
    assert any("on_error observer failed" in r.message for r in caplog.records)


@pytest.mark.parametrize("escape", [SystemExit, KeyboardInterrupt])
def test_an_on_drop_raising_base_exception_on_the_job_loop_is_contained(pool_of, escape):
    """A queued job whose wait passes is dropped on the job loop: its on_drop runs there."""
    dropped = []
    gate = threading.Event()

    def on_drop():
        dropped.append(1)
        raise escape("from on_drop")

    pool = pool_of(1, 1, 0.2)

    async def scenario():
        first = asyncio.create_task(pool.run("a", "c1", held("A", gate)))
        await until(lambda: pool.running() == 1)
        with pytest.raises(PoolBusy):  # waited 0.2 s in the queue
            await pool.run("b", "c2", held("B", gate), on_drop=on_drop)
        assert dropped == [1]
        gate.set()
        assert await first == "A"
        await still_runs(pool)

    run(scenario)


def test_a_cancellation_inside_fn_is_a_failure_seen_by_everyone(pool_of):
    observed = []
    pool = pool_of(2, 2, 5.0, on_error=lambda key, error: observed.append((key, error)))

    async def awaits_a_cancelled_task():
        loop = asyncio.get_running_loop()
        other = loop.create_future()
        loop.call_soon(other.cancel)  # someone else's task, cancelled under the job
        await other

    async def scenario():
        with pytest.raises(JobFault) as failed:
            await pool.run("k", "c", awaits_a_cancelled_task)
        assert isinstance(failed.value.__cause__, JobFault)  # each sharer's own copy
        assert isinstance(failed.value.__cause__.__cause__, asyncio.CancelledError)
        await until(lambda: len(observed) == 1 and pool.running() == 0)

    run(scenario)
    assert observed[0][0] == "k" and isinstance(observed[0][1], JobFault)
    counters = pool.snapshot().counters
    assert (counters.failed, counters.cancelled) == (1, 0)


def test_stop_still_cancels_a_running_job(pool_of):
    pool = pool_of(1, 1, 5.0)
    inside, cancelled = threading.Event(), threading.Event()

    async def runs_until_cancelled():
        inside.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def scenario():
        job = asyncio.create_task(pool.run("k", "c", runs_until_cancelled))
        # running() counts the job from its start; its coroutine's first step comes after
        await until(lambda: pool.running() == 1 and inside.is_set())
        await pool.stop()
        with pytest.raises(Exception) as stopped:
            await job
        assert type(stopped.value).__name__ == "PoolClosed"

    run(scenario)
    assert cancelled.is_set() and pool.snapshot().counters.cancelled == 1


async def cancels_itself_and_waits():
    asyncio.current_task().cancel()  # the job's own task, cancelled by the job
    await asyncio.sleep(1)


async def cancels_itself_and_returns():
    asyncio.current_task().cancel()  # asyncio cancels the task as the coroutine returns
    return "late"


async def an_old_scope_then_a_foreign_cancel():
    asyncio.current_task().cancel()  # a cancel scope (anyio < 4) that never uncancels
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(1)
    loop = asyncio.get_running_loop()
    other = loop.create_future()
    loop.call_soon(other.cancel)
    await other


@pytest.mark.parametrize(
    "fn", [cancels_itself_and_waits, cancels_itself_and_returns, an_old_scope_then_a_foreign_cancel]
)
def test_a_job_cancelled_but_not_by_stop_is_a_fault_every_sharer_and_on_error_see(pool_of, fn):
    observed = []
    pool = pool_of(2, 2, 5.0, on_error=lambda key, error: observed.append((key, error)))
    gate = threading.Event()

    async def slow_then(fn):
        while not gate.is_set():
            await asyncio.sleep(0.002)
        return await fn()

    async def scenario():
        starter = asyncio.create_task(pool.run("k", "c1", lambda: slow_then(fn)))
        await until(lambda: pool.running() == 1)
        sharer = asyncio.create_task(pool.run("k", "c2", None))
        await until(lambda: pool.waiting("k") == 1)
        gate.set()
        for call in (starter, sharer):
            with pytest.raises(JobFault):
                await call
        await until(lambda: len(observed) == 1 and pool.running() == 0)

    run(scenario)
    assert observed[0][0] == "k" and isinstance(observed[0][1], JobFault)
    counters = pool.snapshot().counters
    assert (counters.failed, counters.cancelled) == (1, 0)


def test_a_job_that_cancels_itself_after_its_callers_left_is_still_told(pool_of):
    observed = []
    pool = pool_of(1, 1, 5.0, on_error=lambda key, error: observed.append((key, error)))
    gate = threading.Event()

    async def left_then_cancels_itself():
        while not gate.is_set():
            await asyncio.sleep(0.002)
        await cancels_itself_and_waits()

    async def scenario():
        call = asyncio.create_task(pool.run("k", "c", left_then_cancels_itself))
        await until(lambda: pool.running() == 1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        gate.set()
        await until(lambda: len(observed) == 1 and pool.running() == 0)

    run(scenario)
    assert isinstance(observed[0][1], JobFault)


def test_a_sharer_in_another_process_gets_the_fault_of_a_job_cancelled_not_by_stop(make_pool):
    """Two RedisPools on one namespace, as two processes: the sharer's copy travels as JSON."""
    observed = []
    owner = make_pool(1, 1, 5.0, on_error=lambda key, error: observed.append(error))
    other = make_pool(1, 1, 5.0)
    gate = threading.Event()

    async def then_cancels_itself():
        while not gate.is_set():
            await asyncio.sleep(0.002)
        await cancels_itself_and_waits()

    async def scenario():
        starter = asyncio.create_task(owner.run("k", "c1", then_cancels_itself))
        await until(lambda: owner.running() == 1)
        sharer = asyncio.create_task(other.run("k", "c2", None))
        await until(lambda: owner.waiting("k") == 1)
        gate.set()
        for call in (starter, sharer):
            with pytest.raises(JobFault):
                await call
        await until(lambda: len(observed) == 1)

    run(scenario)
    assert owner.snapshot().counters.failed == 1
