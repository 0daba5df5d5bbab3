"""Delivering an outcome: the error observer (each failed job once, the default logs it, a
raising observer is contained), each sharer's own exception, refusals' codes and Retry-After."""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback

import pytest

from django_pdfpool.admission import Pool
from django_pdfpool.exceptions import CallerBusy, PoolBusy, PoolClosed, Refused
from tests.support.gates import Gate, failing, job, run, until


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


class TwoArgs(Exception):
    def __init__(self, page, reason):
        super().__init__(f"page {page}: {reason}")


class KeywordOnly(Exception):
    def __init__(self, *, code):
        super().__init__(f"code {code}")
        self.code = code


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


class Worded(Exception):
    def __init__(self, user):
        super().__init__(f"quota exceeded for {user}")
        self.user = user


def test_own_exception_says_what_the_original_says_when_its_init_words_the_message():
    # copy.copy calls cls(*args): an __init__ that words its one argument would word the
    # worded message again ("quota exceeded for quota exceeded for bob")
    original = Worded("bob")
    errors = asyncio.run(_sharers_of_a_failure(original, sharers=2))
    assert [(type(e), e.args, e.user) for e in errors] == [(Worded, original.args, "bob")] * 3
    assert all(e is not original and e.__cause__ is original for e in errors)


class NoneFound(Exception):
    """An exception that is also an empty collection: false in a truth test."""

    def __len__(self):
        return 0


def test_a_job_raising_an_exception_false_in_a_truth_test_counts_as_failed():
    async def scenario():
        pool = Pool(slots=1, queue=0, wait=None, on_error=lambda key, exc: None)
        with pytest.raises(NoneFound):
            await pool.run("k", "a", failing(NoneFound("no page matched")))
        return pool.snapshot().counters  # counted before any caller is answered

    counters = run(scenario)
    assert (counters.failed, counters.completed) == (1, 0)


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


def test_a_refusal_pickled_or_copied_keeps_its_retry_after_and_a_too_large_result_says_so():
    """A refusal crossing processes keeps what it says and when to come back, rebuilt from
    its arguments too (Celery's JSON result backend: ``cls(*args)``); a result too large to
    share is worded as one."""
    import copy
    import pickle

    from django_pdfpool.exceptions import CoordinatorUnavailable, ResultTooLarge

    for refusal in (PoolBusy("full", retry_after=7.5), CoordinatorUnavailable("down", 3.0)):
        rebuilt = type(refusal)(*refusal.args)
        for again in (pickle.loads(pickle.dumps(refusal)), copy.copy(refusal), rebuilt):
            assert type(again) is type(refusal)
            assert (str(again), again.retry_after) == (str(refusal), refusal.retry_after)
    too_large = ResultTooLarge("result", "18900000 bytes as JSON, over the limit of 16 bytes")
    assert (
        str(too_large)
        == "the job's result is too large: 18900000 bytes as JSON, over the limit of 16 bytes"
    )


def test_the_413_names_the_limit_in_the_unit_it_is_set_in():
    from django_pdfpool.exceptions import UploadTooLarge

    for limit, shown in ((50 << 20, "50 MiB"), (1536, "1.5 KiB"), (1000, "1000 bytes")):
        assert str(UploadTooLarge.over(limit)) == f"PDFs up to {shown} are accepted."
