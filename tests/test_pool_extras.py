"""Unit tests for what the conformance file does not pin down.

The snapshot and its counters, the error observer, exception objects of their
own for each sharer, what refusals carry, each queued job's own ``wait``,
``wait=None``, where jobs run and how waiters wake, many threads on one pool,
nothing left on the job loop, drain/stop when idle, ``on_drop`` when a job is
stopped before it ran, and a job raising KeyboardInterrupt/SystemExit.
Like the conformance file, each test drives its own loop with asyncio.run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import math
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path
from typing import ClassVar

import pytest

from django_pdfpool.admission.jobloop import get_job_loop
from django_pdfpool.pool import CallerBusy, Pool, PoolBusy, PoolClosed, Refused

QUICK = 0.5  # seconds: "at once" answers well within this
LONG = 5.0  # seconds: "did not hang" answers well within this


class Gate:
    """Holds a job until opened; safe to open from any thread. Every gate a test made is
    opened after it (``_open_gates``), so a failing test leaves no job held."""

    made: ClassVar[list[Gate]] = []

    def __init__(self) -> None:
        self._event = threading.Event()
        Gate.made.append(self)

    def open(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        while not self._event.is_set():
            await asyncio.sleep(0.001)


@pytest.fixture(autouse=True)
def _open_gates():
    yield
    for gate in Gate.made:
        gate.open()
    Gate.made.clear()


def job(result, gate=None, started=None):
    async def fn():
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        return result

    return fn


def failing(error, gate=None):
    async def fn():
        if gate is not None:
            await gate.wait()
        raise error

    return fn


async def until(condition, timeout=LONG):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def eventually(read, expected, timeout=LONG):
    """Poll ``read()`` from a plain thread until it returns ``expected``."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.001)
    return value


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def on_job_loop(read):
    """Call ``read()`` on the job loop's own thread and return what it returns."""
    answer: concurrent.futures.Future = concurrent.futures.Future()

    def call():
        try:
            answer.set_result(read())
        except BaseException as exc:  # reported to the test
            answer.set_exception(exc)

    get_job_loop().call_soon_threadsafe(call)
    return answer.result(LONG)


def job_loop_tasks() -> set[asyncio.Task]:
    return on_job_loop(lambda: set(asyncio.all_tasks(get_job_loop())))


def live_timers(pool: Pool) -> list[asyncio.TimerHandle]:
    """Timers of ``pool`` still armed on the job loop."""
    loop = get_job_loop()
    # loop._scheduled is CPython's private heap of TimerHandles; a cancelled handle
    # lingers there until the loop pops it, so cancelled ones are filtered out.
    return on_job_loop(
        lambda: [
            handle
            for handle in loop._scheduled
            if not handle.cancelled() and getattr(handle._callback, "__self__", None) is pool
        ]
    )


# --- snapshot ----------------------------------------------------------------


def test_snapshot_of_a_scripted_scenario():
    async def scenario():
        pool = Pool(slots=1, queue=2, wait=None, on_error=lambda key, exc: None)
        gate_a, gate_b, gate_f = Gate(), Gate(), Gate()
        a = asyncio.create_task(pool.run("a", "ca", job("A", gate_a)))
        await until(lambda: pool.running() == 1)
        shared = asyncio.create_task(pool.run("a", "s1", None))
        b = asyncio.create_task(pool.run("b", "cb", failing(LookupError("b"), gate_b)))
        c = asyncio.create_task(pool.run("c", "cc", job("C")))
        await until(lambda: pool.queued() == 2 and pool.waiting("a") == 1)
        with pytest.raises(PoolBusy):
            await pool.run("d", "cd", job("D"))
        with pytest.raises(CallerBusy):
            await pool.run("e", "ca", job("E"))
        await asyncio.sleep(0.02)  # so that queued_for and running_for grow

        snap = pool.snapshot()
        assert (snap.slots, snap.queue, snap.wait, snap.closed) == (1, 2, None, False)
        assert (snap.running, snap.queued) == (1, 2)
        jobs = {info.key: info for info in snap.jobs}
        assert {k: (j.caller, j.state, j.sharers) for k, j in jobs.items()} == {
            "a": ("ca", "running", 2),
            "b": ("cb", "queued", 1),
            "c": ("cc", "queued", 1),
        }
        assert jobs["a"].running_for >= 0.02
        assert jobs["a"].started_at is not None
        assert jobs["a"].queued_at <= jobs["a"].started_at <= snap.taken_at
        for key in "bc":
            assert jobs[key].started_at is None
            assert jobs[key].running_for == 0.0
            assert jobs[key].queued_for >= 0.02
            assert jobs[key].queued_at <= snap.taken_at
        assert jobs["a"].queued_for < jobs["b"].queued_for

        c.cancel()  # c's only waiter leaves: abandoned
        await until(lambda: pool.queued() == 1)
        gate_a.open()
        assert await asyncio.gather(a, shared) == ["A", "A"]
        await until(lambda: pool.running() == 1 and pool.queued() == 0)
        await asyncio.sleep(0.01)
        gate_b.open()
        with pytest.raises(LookupError):
            await b
        f = asyncio.create_task(pool.run("f", "cf", job("F", gate_f)))
        await until(lambda: pool.running() == 1)
        await pool.stop()
        with pytest.raises(PoolClosed):
            await f
        with pytest.raises(PoolClosed):
            await pool.run("g", "cg", job("G"))

        snap = pool.snapshot()
        assert (snap.running, snap.queued, snap.jobs, snap.closed) == (0, 0, (), True)
        assert snap.counters.__dict__ == {
            "started": 3,
            "joined": 1,
            "completed": 1,
            "failed": 1,
            "cancelled": 1,
            "abandoned": 1,
            "refused_busy": 1,
            "refused_caller": 1,
            "refused_closed": 1,
        }
        counters = snap.counters
        assert snap.queue_wait.count == counters.started == 3  # a, b, f took a slot
        ended = counters.completed + counters.failed + counters.cancelled
        assert snap.run_time.count == ended == 3  # a, b, f ended
        for figures in (snap.queue_wait, snap.run_time):
            assert 0.0 <= figures.mean <= figures.p95 <= figures.max
            assert figures.p95 == figures.max  # the 95th percentile of three samples
            assert math.isfinite(figures.max)
        assert snap.queue_wait.max >= 0.02  # b waited behind a
        assert snap.run_time.max >= 0.02  # a ran while the test slept

        as_dict = json.loads(json.dumps(snap.as_dict()))
        assert as_dict["counters"]["started"] == 3
        assert as_dict["queue_wait"]["count"] == 3
        assert as_dict["jobs"] == []

    run(scenario)


def test_snapshot_as_dict_with_jobs_is_json():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=5.0)
        gate = Gate()
        a = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        b = asyncio.create_task(pool.run("b", "cb", job("B")))
        await until(lambda: pool.queued() == 1)
        as_dict = json.loads(json.dumps(pool.snapshot().as_dict()))
        assert as_dict["wait"] == 5.0
        assert [(j["key"], j["state"]) for j in as_dict["jobs"]] == [
            ("a", "running"),
            ("b", "queued"),
        ]
        gate.open()
        assert await asyncio.gather(a, b) == ["A", "B"]

    run(scenario)


def test_empty_figures_are_zeros():
    snap = Pool().snapshot()
    for figures in (snap.queue_wait, snap.run_time):
        assert (figures.count, figures.mean, figures.p95, figures.max) == (0, 0.0, 0.0, 0.0)


# --- the error observer ------------------------------------------------------


def test_observer_gets_each_failed_job_once():
    seen = []
    lock = threading.Lock()

    def observer(key, exc):
        with lock:
            seen.append((key, exc))

    async def scenario():
        pool = Pool(slots=2, queue=0, wait=None, on_error=observer)
        gate = Gate()
        first, second = KeyError("one"), OSError("two")
        tasks = [asyncio.create_task(pool.run("x", "c0", failing(first, gate)))]
        tasks.append(asyncio.create_task(pool.run("y", "c1", failing(second, gate))))
        await until(lambda: pool.running() == 2)
        tasks += [asyncio.create_task(pool.run("x", f"s{i}", None)) for i in range(3)]
        await until(lambda: pool.waiting("x") == 3)
        gate.open()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert await pool.run("z", "c0", job("ok")) == "ok"
        await until(lambda: len(seen) >= 2)
        await asyncio.sleep(0.02)  # a second call for one job would show up by now
        # exceptions compare by identity: the observer gets each original
        assert sorted(seen, key=lambda pair: pair[0]) == [("x", first), ("y", second)]

    run(scenario)


def test_default_observer_logs_the_failure(caplog):
    caplog.set_level(logging.WARNING, logger="django_pdfpool.pool")

    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None)
        with pytest.raises(ZeroDivisionError):
            await pool.run("the-key", "c", failing(ZeroDivisionError("oops")))
        await until(lambda: any("the-key" in r.getMessage() for r in caplog.records))

    run(scenario)
    [record] = [r for r in caplog.records if r.name == "django_pdfpool.pool"]
    assert record.levelno >= logging.WARNING
    assert "the-key" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], ZeroDivisionError)


def test_an_observer_that_raises_is_contained_and_logged(caplog):
    caplog.set_level(logging.ERROR, logger="django_pdfpool.pool")

    def observer(key, exc):
        raise RuntimeError("observer broke")

    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None, on_error=observer)
        with pytest.raises(LookupError):
            await pool.run("k", "c", failing(LookupError("job broke")))
        await until(lambda: any(r.exc_info for r in caplog.records))
        assert await pool.run("k", "c", job("fine")) == "fine"
        assert (pool.running(), pool.queued()) == (0, 0)

    run(scenario)
    [record] = [r for r in caplog.records if r.name == "django_pdfpool.pool"]
    assert isinstance(record.exc_info[1], RuntimeError)
    assert "observer broke" in str(record.exc_info[1])


# --- each sharer's exception is its own -------------------------------------


async def _sharers_of_a_failure(error, sharers=3):
    """The exceptions that the starter and ``sharers`` sharers of a failing job get."""
    pool = Pool(slots=1, queue=0, wait=None, on_error=lambda key, exc: None)
    gate = Gate()
    tasks = [asyncio.create_task(pool.run("k", "a", failing(error, gate)))]
    await until(lambda: pool.running() == 1)
    tasks += [asyncio.create_task(pool.run("k", f"s{i}", None)) for i in range(sharers)]
    await until(lambda: pool.waiting("k") == sharers)
    gate.open()
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_each_sharer_gets_its_own_exception_chained_to_the_original():
    original = LookupError("no such page")
    errors = asyncio.run(_sharers_of_a_failure(original))
    assert len({id(e) for e in errors}) == len(errors) == 4
    for error in errors:
        assert type(error) is LookupError and str(error) == "no such page"
        assert error is not original
        assert error.__cause__ is original
    assert len({id(e.__traceback__) for e in errors}) == 4
    frames = [[f.name for f in traceback.extract_tb(e.__traceback__)] for e in errors]
    assert all(names == frames[0] for names in frames)  # none grew by another's frames
    assert frames[0].count("run") == 1  # raised once, in its own caller's Pool.run
    # the original keeps the job's traceback, untouched by any caller
    assert "run" not in [f.name for f in traceback.extract_tb(original.__traceback__)]


class TwoArgs(Exception):
    def __init__(self, page, reason):
        super().__init__(f"page {page}: {reason}")


class KeywordOnly(Exception):
    def __init__(self, *, code):
        super().__init__(f"code {code}")
        self.code = code


@pytest.mark.parametrize(
    "original", [TwoArgs(3, "bad xref"), KeywordOnly(code=7)], ids=["two-args", "kw-only"]
)
def test_own_exception_even_when_its_class_cannot_be_copied(original):
    # copy.copy calls cls(*args), which these classes' __init__ cannot take; sharing
    # the original instead would have every sharer raise (and grow) one object
    errors = asyncio.run(_sharers_of_a_failure(original, sharers=2))
    assert all(type(e) is type(original) and str(e) == str(original) for e in errors)
    assert len({id(e) for e in errors}) == len(errors)
    assert all(e.__cause__ is original for e in errors)


# --- refusals ----------------------------------------------------------------


def test_refusals_carry_a_code_and_a_retry_after():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=0.05)
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        refusals = []
        with pytest.raises(PoolBusy) as expired:  # waited longer than `wait`
            await pool.run("b", "cb", job("B"))
        refusals.append(expired.value)
        queued = asyncio.create_task(pool.run("c", "cc", job("C")))
        await until(lambda: pool.queued() == 1)
        with pytest.raises(PoolBusy) as full:
            await pool.run("d", "cd", job("D"))
        refusals.append(full.value)
        with pytest.raises(CallerBusy) as busy:
            await pool.run("e", "ca", job("E"))
        refusals.append(busy.value)
        queued.cancel()
        gate.open()
        assert await held == "A"
        await pool.drain()
        with pytest.raises(PoolClosed) as closed:
            await pool.run("f", "cf", job("F"))
        refusals.append(closed.value)
        codes = [r.code for r in refusals]
        assert codes == ["busy", "busy", "caller_busy", "closed"]
        for refusal in refusals:
            assert isinstance(refusal, Refused)
            assert isinstance(refusal.retry_after, float | int)
            assert refusal.retry_after >= 0
            assert str(refusal)

    run(scenario)


def test_each_queued_job_waits_its_own_wait():
    wait = 0.1

    async def scenario():
        pool = Pool(slots=1, queue=3, wait=wait)
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        queued, refused_after = [], {}

        async def queue_one(i):
            began = time.monotonic()
            with pytest.raises(PoolBusy):
                await pool.run(f"q{i}", f"c{i}", job(i))
            refused_after[i] = time.monotonic() - began

        def admitted(key, task):
            return task.done() or any(j.key == key for j in pool.snapshot().jobs)

        for i in range(3):  # queued 30 ms apart: deadlines 30 ms apart
            task = asyncio.create_task(queue_one(i))
            queued.append(task)
            await until(functools.partial(admitted, f"q{i}", task))
            await asyncio.sleep(0.03)
        await asyncio.wait_for(asyncio.gather(*queued), LONG)
        assert all(seconds >= wait * 0.9 for seconds in refused_after.values())
        assert pool.snapshot().counters.refused_busy == 3
        gate.open()
        assert await held == "A"

    run(scenario)


# --- wait=None, non-awaitables, where jobs run -------------------------------


def test_wait_none_queues_without_a_time_limit():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=None)
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        queued = asyncio.create_task(pool.run("b", "cb", job("B")))
        await until(lambda: pool.queued() == 1)
        assert live_timers(pool) == []  # nothing will ever expire it
        await asyncio.sleep(0.2)
        assert (pool.queued(), queued.done()) == (1, False)
        gate.open()
        assert await asyncio.gather(held, queued) == ["A", "B"]

    run(scenario)


def test_a_fn_returning_a_non_awaitable_fails_with_type_error_for_every_sharer():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=None, on_error=lambda key, exc: None)
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        starter = asyncio.create_task(pool.run("k", "cb", lambda: 42))
        await until(lambda: pool.queued() == 1)
        sharer = asyncio.create_task(pool.run("k", "cc", None))
        await until(lambda: pool.waiting("k") == 1)
        gate.open()
        for task in (starter, sharer):
            with pytest.raises(TypeError):
                await task
        assert await held == "A"
        assert (pool.running(), pool.queued()) == (0, 0)
        assert await pool.run("k", "cb", job("fine")) == "fine"

    run(scenario)


def test_the_job_runs_on_the_pools_loop_thread_not_the_callers():
    where = {}

    async def fn():
        where["thread"] = threading.get_ident()
        where["loop"] = asyncio.get_running_loop()
        return "done"

    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None)
        assert await pool.run("k", "c", fn) == "done"
        assert where["thread"] != threading.get_ident()
        assert where["loop"] is not asyncio.get_running_loop()
        assert where["loop"] is get_job_loop()

    run(scenario)


def test_waiters_are_woken_through_their_own_loop():
    # In debug mode a loop refuses (RuntimeError) call_soon from another thread, so a
    # future settled straight from the job loop's thread would leave its waiter asleep.
    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None)
        gate = Gate()
        tasks = [asyncio.create_task(pool.run("k", "a", job("r", gate)))]
        await until(lambda: pool.running() == 1)
        tasks.append(asyncio.create_task(pool.run("k", "b", None)))
        await until(lambda: pool.waiting("k") == 1)
        gate.open()
        assert await asyncio.wait_for(asyncio.gather(*tasks), LONG) == ["r", "r"]

    asyncio.run(scenario(), debug=True)


def test_many_threads_each_with_its_own_loop_share_one_pool():
    pool = Pool(slots=2, queue=8, wait=None)
    gate, calls, lock = Gate(), [], threading.Lock()
    results, errors, loops = {}, {}, {}

    def make(key):
        async def fn():
            with lock:
                calls.append(key)
            await gate.wait()
            return f"r-{key}"

        return fn

    def client(i):
        key = f"k{i % 3}"

        async def go():
            loops[i] = asyncio.get_running_loop()
            result = await pool.run(key, f"c{i}", make(key))
            assert asyncio.get_running_loop() is loops[i]
            return result

        try:
            results[i] = asyncio.run(asyncio.wait_for(go(), 30))
        except BaseException as exc:  # reported below
            errors[i] = exc

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    admitted = eventually(
        lambda: (pool.running(), pool.queued(), sum(pool.waiting(f"k{j}") for j in range(3))),
        (2, 1, 5),
    )
    assert admitted == (2, 1, 5)
    gate.open()
    for thread in threads:
        thread.join(LONG)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == {}
    assert results == {i: f"r-k{i % 3}" for i in range(8)}
    assert sorted(calls) == ["k0", "k1", "k2"]
    assert len(set(loops.values())) == 8
    assert (pool.running(), pool.queued()) == (0, 0)


# --- nothing left behind on the job loop -------------------------------------


def test_a_waiter_that_gives_up_leaves_no_task_or_timer_behind():
    before = job_loop_tasks()

    async def scenario():
        pool = Pool(slots=1, queue=2, wait=30.0)
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        # queued, then abandoned by its only waiter: its timer must go
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run("b", "cb", job("B")), timeout=0.05)
        assert pool.queued() == 0
        # queued, then started: its timer must go too
        started = asyncio.create_task(pool.run("c", "cc", job("C", gate)))
        await until(lambda: pool.queued() == 1)
        assert await asyncio.to_thread(eventually, lambda: len(live_timers(pool)), 1) == 1
        held.cancel()  # the starter of a running job leaves; the job runs on
        with pytest.raises(asyncio.CancelledError):
            await held
        gate.open()
        assert await started == "C"
        await until(lambda: pool.running() == 0)
        return pool

    pool = run(scenario)
    assert eventually(lambda: live_timers(pool), []) == []
    assert eventually(lambda: job_loop_tasks() - before, set()) == set()
    assert pool.snapshot().counters.abandoned == 1


def test_an_expired_job_leaves_no_timer_behind():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=0.02)
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        with pytest.raises(PoolBusy):
            await pool.run("b", "cb", job("B"))
        gate.open()
        assert await held == "A"
        return pool

    pool = run(scenario)
    assert eventually(lambda: live_timers(pool), []) == []


# --- drain and stop ----------------------------------------------------------


def test_drain_while_idle_returns_at_once():
    async def scenario():
        pool = Pool()
        began = time.monotonic()
        await pool.drain()
        assert time.monotonic() - began < QUICK
        with pytest.raises(PoolClosed):
            await pool.run("k", "c", job(1))

    run(scenario)


def test_stop_while_idle_returns_at_once():
    async def scenario():
        pool = Pool()
        began = time.monotonic()
        await pool.stop()
        await pool.stop()
        assert time.monotonic() - began < QUICK
        with pytest.raises(PoolClosed):
            await pool.run("k", "c", job(1))

    run(scenario)


def test_drain_refuses_joins():
    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None)
        gate = Gate()
        held = asyncio.create_task(pool.run("k", "a", job("A", gate)))
        await until(lambda: pool.running() == 1)
        draining = asyncio.create_task(pool.drain())
        await until(lambda: pool.snapshot().closed)
        with pytest.raises(PoolClosed):
            await pool.run("k", "b", None)
        gate.open()
        await asyncio.wait_for(draining, LONG)
        assert await held == "A"

    run(scenario)


def test_drain_then_stop_cancels_what_still_runs():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=None)
        gate, started = Gate(), threading.Event()
        running = asyncio.create_task(pool.run("a", "ca", job("A", gate, started)))
        await until(started.is_set)
        sharer = asyncio.create_task(pool.run("a", "cs", None))
        queued = asyncio.create_task(pool.run("b", "cb", job("B")))
        await until(lambda: pool.queued() == 1 and pool.waiting("a") == 1)
        draining = asyncio.create_task(pool.drain())
        await asyncio.sleep(0.02)
        assert not draining.done()
        await asyncio.wait_for(pool.stop(), LONG)
        await asyncio.wait_for(draining, LONG)
        for task in (running, sharer, queued):
            with pytest.raises(PoolClosed):
                await task
        assert (pool.running(), pool.queued(), pool.snapshot().jobs) == (0, 0, ())
        assert pool.snapshot().counters.cancelled == 1

    run(scenario)


# --- on_drop: exactly one of fn() and on_drop() is called --------------------


def test_a_job_stopped_before_its_fn_ran_still_calls_on_drop():
    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None)
        called = []

        async def fn():
            called.append("fn")
            await asyncio.sleep(10)

        hold = threading.Event()  # holds the job loop, so that its next turn runs
        get_job_loop().call_soon_threadsafe(hold.wait, LONG)  # the spawn, then the cancel
        try:
            task = asyncio.create_task(
                pool.run("k", "c", fn, on_drop=lambda: called.append("drop"))
            )
            await until(lambda: pool.running() == 1)
            stopping = asyncio.create_task(pool.stop())
            await until(lambda: pool.snapshot().closed)
        finally:
            hold.set()
        await asyncio.wait_for(stopping, LONG)
        with pytest.raises(PoolClosed):
            await task
        await until(lambda: called, timeout=1.0)
        assert called in (["fn"], ["drop"])

    run(scenario)


# --- a job that raises what asyncio will not contain -------------------------


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit"])
def test_a_job_raising_a_base_exception_does_not_kill_the_job_loop(raised):
    # Run in a child process: the job loop is one per process, and this may break it.
    script = textwrap.dedent(
        f"""
        import asyncio
        from django_pdfpool.pool import Pool

        async def bad():
            raise {raised}

        async def good():
            return "still working"

        async def main():
            pool = Pool(slots=1, queue=0, wait=None, on_error=lambda key, exc: None)
            try:
                await asyncio.wait_for(pool.run("k", "a", bad), 2)
            except asyncio.TimeoutError:
                print("the caller hung")
            except BaseException as exc:
                print("the caller got", type(exc).__name__)
            try:
                print(await asyncio.wait_for(pool.run("k2", "b", good), 2))
            except BaseException as exc:
                print("the next job got", type(exc).__name__)

        asyncio.run(main())
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "the caller hung" not in child.stdout
    assert "still working" in child.stdout, child.stdout + child.stderr
