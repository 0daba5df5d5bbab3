"""The pool's snapshot and its counters: a scripted scenario, as_dict as JSON, empty figures."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from django_pdfpool.admission import Pool
from django_pdfpool.admission.ledger import REMEMBERED, Counter, Ledger
from django_pdfpool.exceptions import CallerBusy, PoolBusy, PoolClosed
from tests.support.gates import Gate, failing, job, run, until


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
            "refused_closed": 2,  # f's caller at stop, and g
            "refused_unavailable": 0,
            "refused_misconfigured": 0,
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


def test_the_callers_refused_last_are_the_ones_remembered():
    """A caller refused again is among the last refused: when ``REMEMBERED`` others have
    been refused since its first refusal, it is not the one forgotten."""
    books = Ledger(1)
    books.refused(Counter.REFUSED_BUSY, "again", 5.0)
    for n in range(REMEMBERED - 1):
        books.refused(Counter.REFUSED_BUSY, f"other-{n}", 5.0)
    books.refused(Counter.REFUSED_BUSY, "again", 5.0)  # the newest refusal now
    books.refused(Counter.REFUSED_BUSY, "newcomer", 5.0)
    assert "again" in books._refused and "other-0" not in books._refused


def test_books_with_no_runs_of_their_own_start_from_the_clusters():
    """``seed``: books that have run nothing estimate from run times seen elsewhere; books
    with runs of their own keep them."""
    new, used = Ledger(slots=1), Ledger(slots=1)
    assert new.expected_start(0, (0.0,)) == 1.0  # nothing known: the default run time
    new.seed((3.0, 3.0, 3.0))
    assert new.expected_start(0, (0.0,)) == 3.0
    used.ended(Counter.COMPLETED, 1.5)
    used.seed((9.0, 9.0))
    assert used.expected_start(0, (0.0,)) == 1.5
    assert new.snapshot(0, None, False, ()).run_time.count == 0  # its figures: its own runs
