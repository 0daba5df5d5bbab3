"""The Redis pool gives the local pool's answers: one script of pool operations (run, join,
refuse, leave, crash, time out, drain; several callers, keys and sizes) played against a
``Pool`` and a ``RedisPool``, every outcome and every reading compared.

Compared exactly: each call's outcome (its result, or its error's type and words), the
counters, and after each step the door's reading (``pressure``) for a grid of keys and
callers: closed, free places, in flight, caller busy, the sizes in flight (as a multiset:
Redis lists them in no order). Compared within ``TOLERANCE``: every Retry-After, a refusal's
and the pressure's. Both pools estimate them with the same ``Ledger`` from the same runs;
what differs is only when the job's clock was read (Redis's clock in whole ms, a round trip
later than the local pool's ``monotonic()``) and how long the step took between the two
pools' readings, well under a second on a loaded machine, while a wrong estimate is off by
a run's length or a doubling (a second or more in these scripts)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter as Multiset
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from django_pdfpool.admission.ledger import CountedBy, Counter
from django_pdfpool.admission.local import Pool
from django_pdfpool.exceptions import CallerBusy, PoolBusy, Refused
from tests.conftest import held, until

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(120)

TOLERANCE = 0.9  # seconds: under a wrong estimate's least error (1 s); see the docstring
KEYS = (None, "a", "b", "c", "x")
SMALL, LARGE = 10_000, 2_000_000
SEEDED = 30
CALLERS = (None, "c1", "c2", "c3", "c9")


class JobCrashed(Exception):
    pass


def crashing(gate: threading.Event):
    async def fn() -> object:
        while not gate.is_set():
            await asyncio.sleep(0.002)
        raise JobCrashed("the job crashed")

    return fn


class Script:
    """One pool driven through the script, its readings written down in ``trace``."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.trace: list[tuple[str, Any]] = []
        self.gates: dict[str, threading.Event] = {}
        self.calls: dict[str, asyncio.Future[Any]] = {}

    def start(
        self, name: str, key: str, caller: str, fn: Any = "held", size: int | None = None,
        timeout: float | None = None,
    ) -> None:  # fmt: skip
        gate = self.gates.setdefault(key, threading.Event())
        job = held(f"r-{key}", gate) if fn == "held" else fn
        call = asyncio.wait_for(self.pool.run(key, caller, job, size=size), timeout)
        self.calls[name] = asyncio.ensure_future(call)

    async def outcome(self, name: str) -> None:
        try:
            got: Any = ("result", await self.calls[name])
        except Refused as refusal:
            got = (type(refusal).__name__, str(refusal), refusal.retry_after)
        except asyncio.CancelledError:
            got = ("cancelled",)
        except Exception as error:
            got = (type(error).__name__, str(error))
        self.trace.append((f"outcome {name}", got))

    def books(self) -> tuple[Any, Any]:
        """The pool's snapshot and this process's books; for a Redis pool, read again (for
        a while) until the cluster's books are this process's: a script's reply the cluster
        has counted may still be on its way to the job loop."""
        pool, deadline = self.pool, time.monotonic() + 10.0
        if not hasattr(pool, "local_snapshot"):
            return (snapshot := pool.snapshot()), snapshot
        while True:
            snapshot, books = pool.snapshot(), pool.local_snapshot()
            if _alike(snapshot, books) or time.monotonic() > deadline:
                return snapshot, books
            time.sleep(0.01)

    def read(self, step: str) -> None:
        pool = self.pool
        snapshot, books = self.books()
        counters = snapshot.counters.as_dict()
        jobs = sorted((job.key, job.caller, job.state, job.sharers) for job in snapshot.jobs)
        self.trace.append((f"{step}: jobs", (jobs, snapshot.closed, snapshot.running)))
        if books is not snapshot:  # the cluster's durations: the same but the seeded runs
            cluster = (snapshot.queue_wait.count, snapshot.run_time.count + SEEDED)
            assert cluster == (books.queue_wait.count, books.run_time.count), step
        self.trace.append((f"{step}: durations", (books.queue_wait.count, books.run_time.count)))
        if books is not snapshot:  # the cluster's books, and this process's
            mine = books.counters.as_dict()
            assert counters == _as_cluster_counts(mine), step
            counters = mine
        waiting = [pool.waiting(key) for key in ("a", "b", "c", "f", "q")]
        counts = (pool.running(), pool.queued(), waiting, counters, pool.idle())
        self.trace.append((f"{step}: counts", counts))
        for key in KEYS:
            for caller in CALLERS:
                p = pool.pressure(key, caller)
                sizes = None if p.sizes is None else Multiset(p.sizes)
                seen = (p.closed, p.free, p.in_flight, p.caller_busy, sizes)
                retries = (p.retry_after, p.caller_retry_after)
                self.trace.append((f"{step}: pressure({key}, {caller})", (seen, retries)))


def _as_cluster_counts(mine: dict[str, int]) -> dict[str, int]:
    """This process's counters as the cluster's books count them: its PROCESS counters not
    in Redis, its seeded runs not either."""
    unshared = [c.value for c in Counter if c.counted_by is CountedBy.PROCESS]
    seeded = {Counter.COMPLETED.value: mine[Counter.COMPLETED.value] - SEEDED}
    return mine | seeded | dict.fromkeys(unshared, 0)


def _alike(snapshot: Any, books: Any) -> bool:
    """Whether the cluster's books (``snapshot``) are this process's (``books``)."""
    durations = (snapshot.queue_wait.count, snapshot.run_time.count + SEEDED)
    same = durations == (books.queue_wait.count, books.run_time.count)
    return same and snapshot.counters.as_dict() == _as_cluster_counts(books.counters.as_dict())


def seed(pool: Any) -> None:
    """Recent runs (this process's books): small inputs took 0.1 s, 2 MB ones 6 s."""
    for n in range(SEEDED):
        pool._books.ended(Counter.COMPLETED, *((0.1, SMALL) if n % 10 else (6.0, LARGE)))


async def play(pool: Any, wait: float | None) -> list[tuple[str, Any]]:
    seed(pool)
    s = Script(pool)
    s.read("idle")
    s.start("unsized", "u", "c11", fn=crashing(s.gates.setdefault("u", threading.Event())))
    await until(lambda: pool.waiting("u") == 0 and pool.pressure("u").in_flight)
    s.start("sized", "u", "c12", fn=None, size=SMALL)  # the same key: the job's size too
    await until(lambda: pool.waiting("u") == 1)
    s.read("sized by a sharer")
    s.gates["u"].set()
    await s.outcome("unsized")
    await s.outcome("sized")
    s.start("a1", "a", "c1", size=SMALL)
    s.start("b2", "b", "c2", fn=crashing(s.gates.setdefault("b", threading.Event())), size=LARGE)
    await until(lambda: pool.running() == 2)
    s.start("c3", "c", "c3", size=SMALL)
    await until(lambda: pool.queued() == 1)
    s.read("full")
    s.start("d4", "d", "c4")  # the queue is full: PoolBusy
    await s.outcome("d4")
    told, _ = pool._books._refused["c4"]
    pool._books._refused["c4"] = (told, 0.0)  # back as told, nothing changed: told twice as long
    s.start("d4 again", "d", "c4")
    await s.outcome("d4 again")
    s.read("refused again")
    s.start("e1", "e", "c1")  # c1 holds "a": CallerBusy
    await s.outcome("e1")
    s.start("nothing", "zz", "c5", fn=None)  # nothing to join
    await s.outcome("nothing")
    s.start("a5", "a", "c5", fn=None)  # joins "a"
    s.start("c6", "c", "c6")  # joins the queued "c"
    await until(lambda: pool.waiting("a") == 1 and pool.waiting("c") == 1)
    s.read("joined")
    s.calls["a5"].cancel()  # a sharer leaves
    await s.outcome("a5")
    s.calls["a1"].cancel()  # the starter leaves: the job runs on, c1 still holds it
    await s.outcome("a1")
    await until(lambda: pool.waiting("a") == 0)
    s.read("left")
    s.start("a7", "a", "c7", fn=None)  # joins the job its starter left
    await until(lambda: pool.waiting("a") == 1)
    s.start("b9", "b", "c9", fn=None)  # shares the job that will crash
    await until(lambda: pool.waiting("b") == 1)
    s.gates["b"].set()  # "b" crashes: its slot goes to "c"
    await s.outcome("b2")
    await s.outcome("b9")
    await until(lambda: pool.running() == 2 and pool.queued() == 0)
    s.read("crashed")
    s.start("q10", "q", "c10", size=SMALL)  # queued, then left by its one caller
    await until(lambda: pool.queued() == 1)
    s.calls["q10"].cancel()
    await s.outcome("q10")
    await until(lambda: pool.queued() == 0)
    s.read("abandoned")
    s.start("t13", "t", "c13", size=SMALL, timeout=0.05)  # queued, timed out
    await s.outcome("t13")
    await until(lambda: pool.queued() == 0)
    s.read("timed out")
    s.start("f8", "f", "c8", size=LARGE)  # queued behind "a" and "c"
    await until(lambda: pool.queued() == 1)
    if wait is not None:  # it waits longer than `wait`: PoolBusy
        await s.outcome("f8")
        s.read("expired")
    pool.count_refusal(PoolBusy("refused at the door", pool.pressure("g", "c9").retry_after), "c9")
    pool.count_refusal(CallerBusy("refused at the door", 2.0), "c1")
    await until(lambda: pool.snapshot().counters[Counter.REFUSED_BUSY] >= 2 + (wait is not None))
    await until(lambda: pool.snapshot().counters[Counter.REFUSED_CALLER] >= 2)
    s.read("door refused")
    s.gates["a"].set()
    s.gates["c"].set()
    s.gates.setdefault("f", threading.Event()).set()
    for name in ("a7", "c3", "c6", *(() if wait is not None else ("f8",))):
        await s.outcome(name)
    await until(lambda: pool.running() == 0 and pool.queued() == 0)
    await pool.drain()
    s.start("late", "h", "c1")
    await s.outcome("late")
    s.read("drained")
    return s.trace


def differences(local: list[tuple[str, Any]], redis: list[tuple[str, Any]]) -> list[str]:
    assert [what for what, _ in local] == [what for what, _ in redis]
    found = []
    for (what, mine), (_, theirs) in zip(local, redis, strict=True):
        if what.endswith(")") and "pressure" in what:
            (seen, retries), (seen_r, retries_r) = mine, theirs
            off = any(abs(x - y) > TOLERANCE for x, y in zip(retries, retries_r, strict=True))
            if seen != seen_r or off:
                found.append(f"{what}: local {mine}, redis {theirs}")
        elif what.startswith("outcome") and len(mine) == 3 and len(theirs) == 3:
            if mine[:2] != theirs[:2] or abs(mine[2] - theirs[2]) > TOLERANCE:
                found.append(f"{what}: local {mine}, redis {theirs}")
        elif mine != theirs:
            found.append(f"{what}: local {mine}, redis {theirs}")
    return found


@pytest.mark.parametrize("wait", [None, 30.0])  # no job waits out 30 s in the script
def test_the_redis_pool_answers_as_the_local_pool(make_pool, wait):
    pools = (Pool(2, 1, wait), make_pool(2, 1, wait))
    with ThreadPoolExecutor(2) as both:  # side by side: the waiting variant waits out 30 s once
        local, redis = (both.submit(asyncio.run, play(pool, wait)) for pool in pools)
        found = differences(local.result(), redis.result())
    assert found == [], "\n".join(found)


async def play_expiry(pool: Any) -> list[tuple[str, Any]]:
    """One slot held by a 2 MB job; the job queued behind it waits past ``wait``: the
    refusal's Retry-After is the 2 MB job's likely end, read as the local pool reads it."""
    seed(pool)
    s = Script(pool)
    s.start("big", "big", "c1", size=LARGE)
    await until(lambda: pool.running() == 1)
    s.start("small", "small", "c2", size=SMALL)
    await s.outcome("small")
    s.read("expired")
    s.gates["big"].set()
    await s.outcome("big")
    return s.trace


def test_a_job_that_waited_too_long_is_told_what_the_local_pool_tells(make_pool):
    local = asyncio.run(play_expiry(Pool(1, 1, 0.3)))
    redis = asyncio.run(play_expiry(make_pool(1, 1, 0.3)))
    found = differences(local, redis)
    assert found == [], "\n".join(found)


async def play_stop(pool: Any) -> list[tuple[str, Any]]:
    """``stop()`` with a job running, one queued, and a sharer of each: PoolClosed to all."""
    seed(pool)
    s = Script(pool)
    s.start("a1", "a", "c1", size=SMALL)
    await until(lambda: pool.running() == 1)
    s.start("b2", "b", "c2", size=LARGE)
    await until(lambda: pool.queued() == 1)
    s.start("a3", "a", "c3", fn=None)
    s.start("b4", "b", "c4", fn=None)
    await until(lambda: pool.waiting("a") == 1 and pool.waiting("b") == 1)
    s.read("held")
    await pool.stop()
    for name in ("a1", "a3", "b2", "b4"):
        await s.outcome(name)
    s.read("stopped")
    return s.trace


def test_a_stopped_redis_pool_answers_as_the_local_pool(make_pool):
    local = asyncio.run(play_stop(Pool(1, 1, None)))
    redis = asyncio.run(play_stop(make_pool(1, 1, None)))
    found = differences(local, redis)
    assert found == [], "\n".join(found)


async def play_drain(pool: Any) -> list[tuple[str, Any]]:
    """``drain()`` with a job running and one queued: both run, a new call is refused."""
    seed(pool)
    s = Script(pool)
    s.start("a1", "a", "c1", size=SMALL)
    await until(lambda: pool.running() == 1)
    s.start("b2", "b", "c2", size=SMALL)
    await until(lambda: pool.queued() == 1)
    draining = asyncio.ensure_future(pool.drain())
    await until(lambda: pool.pressure().closed)
    s.start("late", "c", "c3")
    await s.outcome("late")
    s.start("a4", "a", "c4", fn=None)  # a job in flight: closed all the same
    await s.outcome("a4")
    s.read("draining")
    s.gates["a"].set()
    s.gates["b"].set()
    await s.outcome("a1")
    await s.outcome("b2")
    await draining
    s.read("drained")
    return s.trace


def test_a_draining_redis_pool_answers_as_the_local_pool(make_pool):
    local = asyncio.run(play_drain(Pool(1, 1, None)))
    redis = asyncio.run(play_drain(make_pool(1, 1, None)))
    found = differences(local, redis)
    assert found == [], "\n".join(found)


async def play_empty_names(pool: Any) -> list[tuple[str, Any]]:
    """``""`` is a key and a caller like any other, and None is none: a job for key ``""``
    started by caller ``""``, shared once, read by ``waiting`` and ``pressure``."""
    s = Script(pool)
    s.start("empty", "", "")
    await until(lambda: pool.running() == 1)
    s.start("sharer", "", "c1", fn=None)
    await until(lambda: pool.waiting("") == 1)
    names = (None, "", "x")
    readings = [(k, c, pool.pressure(k, c)) for k in names for c in names]
    s.trace.append(("waiting", (pool.waiting(""), pool.waiting("x"))))
    s.trace += [(f"({k!r}, {c!r})", (p.in_flight, p.caller_busy)) for k, c, p in readings]
    s.gates[""].set()
    await s.outcome("empty")
    await s.outcome("sharer")
    return s.trace


def test_the_empty_key_and_caller_read_alike_in_both_pools(make_pool):
    local = asyncio.run(play_empty_names(Pool(1, 1, None)))
    redis = asyncio.run(play_empty_names(make_pool(1, 1, None)))
    assert ("waiting", (1, 0)) in local
    assert ("('', None)", (True, False)) in local
    assert ("(None, '')", (False, True)) in local
    assert ("(None, None)", (False, False)) in local
    assert differences(local, redis) == []
