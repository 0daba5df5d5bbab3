"""Retry-After from what the pool knows, both pools alike: a running job's elapsed time
against recent run times, never under a second, growing for a caller refused again while
nothing changed."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from django_pdfpool.admission.ledger import AGAIN, Counter, Ledger
from django_pdfpool.admission.local import Pool
from django_pdfpool.exceptions import CallerBusy, CoordinatorUnavailable, PoolBusy, PoolClosed
from tests.conftest import held, until

pytest_plugins = ["tests.support.redis_fixtures"]


@pytest.fixture(params=["local", "redis"])
def make(request):
    """A pool of one slot and no queue, with ``runs`` as its recent run times."""

    def build(runs: list[float]):
        if request.param == "local":
            pool = Pool(1, 0, 10.0)
        else:
            pool = request.getfixturevalue("make_pool")(1, 0, 10.0)
        for took in runs:
            pool._books.ended(Counter.COMPLETED, took)
        return pool

    return build


async def age(pool, key: str, seconds: float) -> None:
    """``key``'s running job as if it had started ``seconds`` earlier, where the pool keeps
    its start (the job's record here, its hash in Redis): aged without waiting."""
    if isinstance(pool, Pool):
        with pool._lock:
            pool._jobs[key].started_mono -= seconds
    else:
        link = pool._side.link
        job = f"{link.prefix}job:{key}"
        await asyncio.to_thread(link.sync().hincrby, job, "st", -round(seconds * 1000))


def back_as_told(pool, caller: str) -> None:
    """``caller`` as if it had waited the Retry-After it was last told (without waiting)."""
    told, _ = pool._books._refused[caller]
    pool._books._refused[caller] = (told, 0.0)


async def holding(pool, gate: threading.Event) -> asyncio.Future:
    """Caller ``c1``'s job ``long`` in the pool's one slot, running until ``gate`` is set."""
    running = asyncio.ensure_future(pool.run("long", "c1", held("done", gate)))
    await until(lambda: pool.running() == 1)
    return running


async def refused(pool, key: str, caller: str) -> float:
    with pytest.raises((PoolBusy, CallerBusy)) as refusal:
        await pool.run(key, caller, held("never", threading.Event()))
    return refusal.value.retry_after


def test_a_running_job_is_given_what_runs_like_it_took_more(make):
    """Runs of 0.5 s and 20 s: a job still running after 0.5 s is one of the long ones, so
    a place frees in about 20 s less what it has run, not in a typical run's second."""
    pool = make([0.5] * 9 + [20.0])
    gate = threading.Event()

    async def scenario():
        running = await holding(pool, gate)
        began = time.monotonic()
        await age(pool, "long", 0.6)  # past every short run
        told = await refused(pool, "other", "c2")
        read = await asyncio.to_thread(pool.pressure, "other", "c9")
        elapsed = 0.6 + time.monotonic() - began
        for seconds in (told, read.retry_after):
            assert 20.0 - elapsed - 1 <= seconds <= 20.0 - 0.6
        gate.set()
        assert await running == "done"

    asyncio.run(scenario())


def test_an_overdue_job_is_given_as_long_again_never_under_a_second(make):
    """Every recent run took 0.1 s; a job running past them has likely as long again to go,
    and no refusal ever says less than a second."""
    pool = make([0.1] * 5)
    gate = threading.Event()

    async def scenario():
        assert (await asyncio.to_thread(pool.pressure)).retry_after >= 1.0  # idle: 1 s
        running = await holding(pool, gate)
        assert await refused(pool, "other", "c2") >= 1.0  # 0.1 s runs: still a second
        assert await refused(pool, "again", "c1") >= 1.0  # the caller's own job: 429
        began = time.monotonic()
        await age(pool, "long", 1.5)
        told = await refused(pool, "other", "c3")
        assert told >= 1.5 and told <= 1.5 + (time.monotonic() - began) + 1
        gate.set()
        assert await running == "done"

    asyncio.run(scenario())


def test_a_caller_refused_again_while_nothing_changed_is_told_longer(make):
    """Each time the same caller comes back as told and is refused while the pool has not
    changed, its Retry-After doubles (``AGAIN`` times at most), whether refused by ``run`` or
    by a door that read the pool's pressure and counted its refusal; a job that ends starts
    the count again."""
    pool = make([20.0])
    gate = threading.Event()

    async def scenario():
        running = await holding(pool, gate)
        first = await refused(pool, "other", "c2")
        back_as_told(pool, "c2")
        second = await refused(pool, "other", "c2")
        assert 1.9 * first <= second <= 2 * first
        assert (await refused(pool, "other", "c3")) <= first  # another caller: not grown
        back_as_told(pool, "c2")
        door = await asyncio.to_thread(pool.pressure, "other", "c2")  # the door's reading
        assert 1.9 * second <= door.retry_after <= 2 * second
        pool.count_refusal(PoolBusy("at the door", door.retry_after), "c2")
        back_as_told(pool, "c2")
        read = await asyncio.to_thread(pool.pressure, "other", "c2")
        assert read.retry_after >= 1.9 * door.retry_after
        for _ in range(AGAIN + 2):
            back_as_told(pool, "c2")
            most = await refused(pool, "other", "c2")
        assert most <= 2**AGAIN * first
        busy = [await refused(pool, "mine", "c1")]
        back_as_told(pool, "c1")
        busy.append(await refused(pool, "mine", "c1"))  # the 429 grows too
        assert busy[1] >= 1.9 * busy[0]
        gate.set()
        assert await running == "done"
        await until(lambda: pool.running() == 0)
        other_gate = threading.Event()
        again = asyncio.ensure_future(pool.run("next", "c4", held("done", other_gate)))
        await until(lambda: pool.running() == 1)
        assert await refused(pool, "other", "c2") < 1.5 * first  # the pool changed: not grown
        other_gate.set()
        assert await again == "done"

    asyncio.run(scenario())


def test_a_caller_back_sooner_than_told_is_told_as_before(make):
    """A client that comes back before its Retry-After (ignoring it) is told what it was told
    last, from a fresh estimate, not longer: the header stays near the actual wait (runs of
    200 s: a slow second between two refusals moves the estimate by half a percent)."""
    pool = make([200.0])
    gate = threading.Event()

    async def scenario():
        running = await holding(pool, gate)
        first = await refused(pool, "other", "c2")
        soon = [await refused(pool, "other", "c2") for _ in range(AGAIN + 1)]
        assert max(soon) <= 1.1 * first
        back_as_told(pool, "c2")
        assert await refused(pool, "other", "c2") >= 1.9 * max(soon)  # then back as told
        again = await refused(pool, "other", "c2")  # and at once: as last told
        assert 1.9 * max(soon) <= again <= 2.2 * max(soon)
        gate.set()
        assert await running == "done"

    asyncio.run(scenario())


def test_refused_again_is_remembered_for_a_bounded_number_of_callers():
    books = Ledger(1)
    for n in range(5000):
        books.refused(Counter.REFUSED_BUSY, f"caller-{n}")
    assert len(books._refused) <= 1024
    assert books.expected_start(0, [0.0], caller="caller-4999") == 2.0
    books.started(0.0)  # the pool changed
    assert not books._refused and books.expected_start(0, [0.0], caller="caller-4999") == 1.0


def test_no_refusal_carries_less_than_a_second():
    for refusal in (PoolBusy("x", 0.2), CallerBusy("x", 0.0), CoordinatorUnavailable("x", 0.5)):
        assert refusal.retry_after == 1.0
    assert PoolClosed().retry_after == 1.0 and PoolBusy("x", 2.5).retry_after == 2.5


def test_a_running_job_is_given_what_runs_of_its_size_took():
    """Nine runs in ten took 0.1 s, the tenth (2 MB inputs) 6 s: a refused newcomer is told
    about a second while a small job runs, up to 6 s while a 2 MB one does (the pool knows each
    job's size); a ledger told no sizes goes by every run."""
    pool = Pool(1, 0, 10.0)
    for _ in range(27):
        pool._books.ended(Counter.COMPLETED, 0.1, 10_000)
    for _ in range(3):
        pool._books.ended(Counter.COMPLETED, 6.0, 2_000_000)
    assert pool._books.expected_start(0, [0.0]) == 1.0

    async def scenario(size: int) -> float:
        gate = threading.Event()
        running = asyncio.ensure_future(
            pool.run(f"job-{size}", "c1", held("done", gate), size=size)
        )
        await until(lambda: pool.running() == 1)
        told = await refused(pool, "other", f"c-{size}")
        gate.set()
        assert await running == "done"
        return told

    # the running job's age (how late the refusal came) takes off its estimate: bounds loose
    assert asyncio.run(scenario(10_000)) < 2.0
    assert 3.0 <= asyncio.run(scenario(2_100_000)) <= 6.0
