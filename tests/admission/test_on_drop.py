"""The pool's ownership hand-off: exactly one of fn() and on_drop() is called, once,
on every path a call can take (run, join, refusal, abandon, expiry, stop)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from django_pdfpool.admission import Pool
from django_pdfpool.exceptions import CallerBusy, PoolBusy, PoolClosed


class Owner:
    """Counts, thread-safely, how often its job ran and how often it was dropped."""

    def __init__(self, result="r", gate: threading.Event | None = None) -> None:
        self.ran = 0
        self.dropped = 0
        self.result = result
        self.gate = gate
        self._lock = threading.Lock()

    async def fn(self):
        with self._lock:
            self.ran += 1
        while self.gate is not None and not self.gate.is_set():
            await asyncio.sleep(0.001)
        return self.result

    def on_drop(self) -> None:
        with self._lock:
            self.dropped += 1

    @property
    def calls(self) -> tuple[int, int]:
        return self.ran, self.dropped


GATES: list[threading.Event] = []  # this test's gates, opened whatever its ending


def new_gate() -> threading.Event:
    GATES.append(threading.Event())
    return GATES[-1]


@pytest.fixture(autouse=True)
def _open_gates():
    """A test that fails leaves no job of its own polling a closed gate on the job loop."""
    yield
    for gate in GATES:
        gate.set()
    GATES.clear()


async def until(condition, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_job_that_runs_is_not_dropped():
    async def scenario():
        pool, owner = Pool(1, 0, 1.0), Owner()
        assert await pool.run("k", "c", owner.fn, on_drop=owner.on_drop) == "r"
        assert owner.calls == (1, 0)

    run(scenario)


def test_joining_and_refusals_drop_at_once():
    async def scenario():
        pool, gate = Pool(1, 0, 1.0), new_gate()
        starter = Owner(gate=gate)
        task = asyncio.create_task(pool.run("k", "a", starter.fn, on_drop=starter.on_drop))
        await until(lambda: pool.running() == 1)
        joiner, busy, same_caller = Owner(), Owner(), Owner()
        joined = asyncio.create_task(pool.run("k", "b", joiner.fn, on_drop=joiner.on_drop))
        await until(lambda: pool.waiting("k") == 1)
        assert joiner.calls == (0, 1)
        with pytest.raises(PoolBusy):
            await pool.run("other", "c", busy.fn, on_drop=busy.on_drop)
        with pytest.raises(CallerBusy):
            await pool.run("other", "a", same_caller.fn, on_drop=same_caller.on_drop)
        assert busy.calls == same_caller.calls == (0, 1)
        gate.set()
        assert await asyncio.gather(task, joined) == ["r", "r"]
        assert starter.calls == (1, 0)
        await pool.drain()
        closed = Owner()
        with pytest.raises(PoolClosed):
            await pool.run("k", "z", closed.fn, on_drop=closed.on_drop)
        assert closed.calls == (0, 1)

    run(scenario)


def test_a_queued_job_dropped_by_its_last_waiter_expiry_or_stop_is_dropped_once():
    async def scenario():
        pool, gate = Pool(1, 3, 0.3), new_gate()
        holder = Owner(gate=gate)
        held = asyncio.create_task(pool.run("h", "h", holder.fn, on_drop=holder.on_drop))
        await until(lambda: pool.running() == 1)
        left, expired = Owner(), Owner()
        leaving = asyncio.create_task(pool.run("l", "l", left.fn, on_drop=left.on_drop))
        await until(lambda: pool.queued() == 1)
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        assert left.calls == (0, 1)
        with pytest.raises(PoolBusy):
            await pool.run("e", "e", expired.fn, on_drop=expired.on_drop)
        assert expired.calls == (0, 1)
        stopped = Owner()
        queued = asyncio.create_task(pool.run("s", "s", stopped.fn, on_drop=stopped.on_drop))
        await until(lambda: pool.queued() == 1)
        await pool.stop()
        for task in (held, queued):
            with pytest.raises(PoolClosed):
                await task
        assert stopped.calls == (0, 1)
        assert holder.calls == (1, 0)  # it ran (and was cancelled): never dropped too

    run(scenario)


def test_a_starter_that_leaves_a_shared_queued_job_does_not_drop_it():
    async def scenario():
        pool, gate = Pool(1, 1, 5.0), new_gate()
        holder = Owner(gate=gate)
        held = asyncio.create_task(pool.run("h", "h", holder.fn, on_drop=holder.on_drop))
        await until(lambda: pool.running() == 1)
        owner = Owner(result="mine")
        starter = asyncio.create_task(pool.run("k", "a", owner.fn, on_drop=owner.on_drop))
        await until(lambda: pool.queued() == 1)
        sharer = asyncio.create_task(pool.run("k", "b", None))
        await until(lambda: pool.waiting("k") == 1)
        starter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starter
        assert owner.calls == (0, 0)  # still needed: the sharer waits for it
        gate.set()
        assert await sharer == "mine"
        await held
        assert owner.calls == (1, 0)

    run(scenario)


def test_a_failing_on_drop_is_logged_not_raised(caplog):
    async def scenario():
        pool = Pool(1, 0, 1.0)

        def broken():
            raise OSError("disk gone")

        with pytest.raises(ValueError):  # nothing to join and no fn: still dropped
            await pool.run("k", "c", None, on_drop=broken)

    run(scenario)
    assert "on_drop callback failed" in caplog.text
