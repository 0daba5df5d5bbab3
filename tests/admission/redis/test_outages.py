"""Redis failing, lost, restarted empty or slow under running jobs, each against real redis-servers:
the local fallback counts what runs, a caller leaving while admission fails still gets on_drop,
an exception that cannot be encoded still answers everyone, a forward clock step past the
lease, reads while the pool stops, one dropped connection."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from uuid import uuid4

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.admission.history import Recorder
from django_pdfpool.admission.jobs import get_job_loop, queue_full
from django_pdfpool.admission.ledger import Counter
from django_pdfpool.admission.redis.link import SOURCES
from django_pdfpool.exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    PoolBusy,
    RemoteJobError,
    RunnerLost,
)
from tests.conftest import held, until
from tests.support.outages import _answer, run
from tests.support.redis_proxy import HoldingProxy, ReplyCutter
from tests.support.redis_server import LEASE, RedisServer, namespace_keys, pools_in

pytest_plugins = ["tests.support.redis_fixtures"]


pytestmark = pytest.mark.timeout(90)


PATIENCE = 10.0  # seconds: "did not hang", on a busy 2-core machine


@contextlib.contextmanager
def silent_redis() -> Iterator[str]:
    """A listener that accepts connections and never answers: Redis hung."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for this one")


def _own_jobs(pool: RedisPool) -> list[tuple[str, str]]:
    """The jobs ``pool`` runs or queues in this process, as its own table has them."""
    return [(job.key, job.state) for job in pool.local_snapshot().jobs]


def _running_keys(server: RedisServer, namespace: str) -> set[str]:
    with (
        contextlib.suppress(redis.RedisError),
        redis.Redis.from_url(server.url, decode_responses=True) as client,
    ):
        return set(client.smembers("{" + namespace + "}:running"))
    return set()


def _job_loop_lag() -> float:
    """Seconds the job loop takes to run a callback handed to it now."""
    done = threading.Event()
    started = time.monotonic()
    get_job_loop().call_soon_threadsafe(done.set)
    assert done.wait(PATIENCE)
    return time.monotonic() - started


def _errors_reading_while_stopping(pool: RedisPool) -> list[BaseException]:
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                pool.queued()
                pool.running()
                pool.snapshot()
            except BaseException as error:  # any crash is the failure
                errors.append(error)
                return

    run(lambda: pool.run("k", "c", _answer))  # the pool has connections to close
    reader = threading.Thread(target=read)
    reader.start()
    try:
        asyncio.run(asyncio.wait_for(pool.stop(), 10))
    finally:
        stop.set()
        reader.join(10)
    return errors


def test_refusals_for_want_of_redis_are_counted_as_unavailable_not_busy():
    """An outage is not overload: its 503s count in refused_unavailable (the metrics' reason
    "unavailable"), none in refused_busy."""
    with silent_redis() as url:
        pool = RedisPool(1, 1, 5.0, url=url, namespace="silent", timeout=0.5, fallback="refuse")

        async def scenario():
            for caller in ("c1", "c2"):  # the first waits out the timeout, the second not
                with pytest.raises(CoordinatorUnavailable):
                    await pool.run("k", caller, _answer)
            await pool.stop()

        run(scenario)
        counters = pool.local_snapshot().counters
    assert (counters.refused_unavailable, counters.refused_busy) == (2, 0)


@pytest.mark.parametrize("fallback", ["refuse", "local"])
def test_a_caller_leaving_while_admission_fails_still_gets_on_drop(fallback):
    calls, drops = [], []
    with silent_redis() as url:
        pool = RedisPool(1, 1, 5.0, url=url, namespace="silent", timeout=0.5, fallback=fallback)

        async def scenario():
            fn = held("never", threading.Event(), calls)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pool.run("k", "c", fn, on_drop=lambda: drops.append(1)), 0.1)
            await until(lambda: calls or drops)
            await pool.stop()

        run(scenario)
    assert (len(calls), len(drops)) == (0, 1), "exactly one of fn() and on_drop()"


def test_a_job_whose_exception_cannot_be_shown_still_answers_everyone(make_pool):
    here, there = make_pool(1, 1, 5.0), make_pool(1, 1, 5.0)
    gate = threading.Event()

    async def fails():
        while not gate.is_set():
            await asyncio.sleep(0.002)
        raise Unprintable()

    async def scenario():
        starter = asyncio.create_task(here.run("k", "a", fails))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        gate.set()
        with pytest.raises(Unprintable):
            await starter
        with pytest.raises(RemoteJobError) as remote:
            await sharer
        assert "Unprintable" in remote.value.type_name
        await until(lambda: here.running() == 0)
        assert await asyncio.wait_for(there.run("next", "c", _answer), 10) == 42

    run(scenario)


def test_the_local_fallback_counts_the_jobs_running_when_redis_failed(own_redis):
    namespace = f"t-{uuid4().hex[:12]}"
    make = pools_in(own_redis, namespace)[0]
    pool = make(1, 1, 10.0, fallback="local")
    gate, calls = threading.Event(), []

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate, calls)))
        # running() counts the job once Redis admits it; it runs here once its fn has begun
        await until(lambda: pool.running() == 1 and calls == ["K"])
        own_redis.kill()
        await until(lambda: pool.mode == "local-fallback")
        joiner = asyncio.create_task(pool.run("k", "b", held("again", gate, calls)))
        other = asyncio.create_task(pool.run("j", "c", held("J", gate, calls)))
        await until(lambda: pool.queued() == 1)  # the one slot is the running job's
        assert calls == ["K"], "the same key ran twice, or more than SLOTS ran"
        gate.set()
        assert await asyncio.gather(running, joiner, other) == ["K", "K", "J"]
        assert calls == ["K", "J"]
        await pool.stop()

    run(scenario)


def test_the_local_fallback_counts_each_job_once_in_one_set_of_books(own_redis):
    """A job running when Redis failed is held by the fallback pool: counted there, not also
    as this process's own; the fallback's jobs reach the durations as well as the counters."""
    pool = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0](2, 2, 10.0, fallback="local")
    gate, calls = threading.Event(), []

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate, calls)))
        await until(lambda: _own_jobs(pool) == [("k", "running")] and calls == ["K"])
        own_redis.kill()
        await until(lambda: pool.mode == "local-fallback")
        joiner = asyncio.create_task(pool.run("k", "b", held("again", gate, calls)))
        await until(lambda: pool.waiting("k") == 1)
        assert (pool.running(), pool.queued()) == (1, 0)
        local = pool.local_snapshot()
        assert [(job.key, job.state, job.sharers) for job in local.jobs] == [("k", "running", 2)]
        assert local.running == pool.snapshot().running == 1
        gate.set()
        assert await asyncio.gather(running, joiner) == ["K", "K"]
        for n in range(3):
            assert await pool.run(f"j{n}", "c", _answer) == 42
        books = pool.snapshot()
        assert books.counters.started == books.queue_wait.count == 4
        assert books.counters.completed == books.run_time.count == 4
        await pool.stop()

    run(scenario)


def test_a_call_made_as_the_local_fallback_begins_joins_the_running_job(own_redis):
    """Callers read the mode on their own threads and go straight to the fallback pool: the
    jobs running from Redis mode must be that pool's before the mode says "local-fallback".
    A logging handler holds the job loop at the fallback's warning (just after the switch)
    until another thread's call for the running key is in the fallback pool; before the
    fix it ran the key a second time there (test_redis_faults' "a key running twice")."""
    namespace = f"t-{uuid4().hex[:12]}"
    pool = pools_in(own_redis, namespace)[0](1, 1, 10.0, fallback="local")
    gate, calls, answers = threading.Event(), [], []

    def call_again() -> None:
        try:
            answers.append(
                asyncio.run(asyncio.wait_for(pool.run("k", "b", held("b", gate, calls)), 30))
            )
        except BaseException as error:  # the assertion below shows it
            answers.append(error)

    again = threading.Thread(target=call_again)

    def in_the_fallback() -> bool:
        jobs = pool.local_snapshot().jobs
        return pool.waiting("k") >= 1 or any(job.caller == "b" for job in jobs)

    class AtTheSwitch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "this process's own pool" in record.getMessage() and not again.is_alive():
                again.start()
                deadline = time.monotonic() + PATIENCE
                while not in_the_fallback() and time.monotonic() < deadline:
                    time.sleep(0.002)

    handler = AtTheSwitch(logging.WARNING)
    logger = logging.getLogger("django_pdfpool.redis")
    logger.addHandler(handler)

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("a", gate, calls)))
        await until(lambda: _own_jobs(pool) == [("k", "running")])
        own_redis.kill()
        await until(lambda: pool.mode == "local-fallback" and again.is_alive(), PATIENCE)
        await until(in_the_fallback, PATIENCE)
        assert calls == ["a"], "the running key ran again in the fallback pool"
        gate.set()
        assert await running == "a"
        await until(lambda: not again.is_alive(), PATIENCE)
        assert answers == ["a"], "the call did not join the running job"
        await pool.stop()

    try:
        run(scenario)
    finally:
        logger.removeHandler(handler)
        gate.set()


def test_jobs_the_fallback_started_keep_the_rules_once_redis_is_back(own_redis):
    """Redis does not know the jobs the fallback started: until they end, a call for one of
    their keys joins it, and a caller holding one is refused, in the pool and its readings."""
    pool = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0](2, 2, 10.0, fallback="local")
    gate, calls = threading.Event(), []

    async def scenario():
        assert await pool.run("warm", "w", _answer) == 42  # Redis in use
        own_redis.kill()
        first = asyncio.create_task(pool.run("k", "a", held("first", gate, calls)))
        await until(lambda: pool.mode == "local-fallback" and calls == ["first"])
        own_redis.start()
        await until(lambda: pool.mode == "redis", PATIENCE)
        assert pool.pressure("k", "b").in_flight and pool.pressure("j", "a").caller_busy
        joiner = asyncio.create_task(pool.run("k", "b", held("second", gate, calls)))
        await until(lambda: pool.waiting("k") == 1)
        with pytest.raises(CallerBusy):
            await pool.run("j", "a", _answer)
        assert calls == ["first"], "the fallback's key ran again"
        gate.set()
        assert await asyncio.gather(first, joiner) == ["first", "first"]
        assert await pool.run("j", "a", _answer) == 42  # in Redis once the fallback is idle
        await pool.stop()

    run(scenario)


def test_an_admission_that_timed_out_leaves_no_job_once_redis_answers(own_redis):
    """Redis paused: the admit times out (the caller gets its 503 and on_drop) but runs once
    Redis resumes, making a job nobody runs. Back, the process ends it at once, well before
    its lease would (a process with short jobs renews its lease and never beats)."""
    lease = 10.0
    pool = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0](1, 0, 10.0, timeout=0.3, lease=lease)
    drops = []

    async def scenario():
        assert await pool.run("warm", "w", _answer) == 42
        own_redis.pause()
        try:
            with pytest.raises(CoordinatorUnavailable):
                await pool.run("x", "a", _answer, on_drop=lambda: drops.append("x"))
        finally:
            own_redis.resume()
        assert drops == ["x"]
        await until(lambda: pool.mode == "redis", PATIENCE)
        await until(lambda: pool.running() == 0, lease / 2)  # did not wait for the lease
        assert await pool.run("y", "a", _answer) == 42  # the slot and the caller are free
        await pool.stop()

    run(scenario)


def test_a_running_job_is_counted_again_after_redis_restarts_empty(own_redis):
    namespace = f"t-{uuid4().hex[:12]}"
    make = pools_in(own_redis, namespace)[0]
    here, there = make(1, 1, 10.0), make(1, 1, 10.0)
    gate, calls = threading.Event(), []

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate, calls)))
        # the pool's own reading (its admit reply read, the job running here), not Redis's:
        # restarted before that reply is read, the admission itself fails
        await until(lambda: _own_jobs(here) == [("k", "running")])
        own_redis.restart()  # empty
        # within about a lease, Redis counts the job again: it holds the one slot
        await until(lambda: here.mode == "redis" and _running_keys(own_redis, namespace) == {"k"})
        joiner = asyncio.create_task(there.run("k", "b", held("again", gate, calls)))
        other = asyncio.create_task(there.run("j", "c", held("J", gate, calls)))
        await until(lambda: there.queued() == 1 and there.waiting("k") >= 1)
        assert calls == ["K"], "the same key ran twice, or more than SLOTS ran"
        gate.set()
        assert await asyncio.gather(running, joiner, other) == ["K", "K", "J"]
        await asyncio.gather(here.stop(), there.stop())

    run(scenario)
    assert namespace_keys(own_redis.url, namespace) == []


def test_a_sharer_elsewhere_of_a_job_counted_again_after_a_restart_gets_its_result(own_redis):
    """Redis restarts empty under a running job shared by another process: the owner counts
    the job again, and the sharer's process its callers on it, so the finished job's result
    reaches them (it ended with RunnerLost: Redis no longer knew they waited)."""
    lease = 6.0  # the owner's probe (each second) counts the job again before two beats
    namespace = f"t-{uuid4().hex[:12]}"
    make = pools_in(own_redis, namespace)[0]
    here, there = make(1, 1, 10.0, lease=lease), make(1, 1, 10.0, lease=lease)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        own_redis.restart()  # empty
        await until(lambda: _running_keys(own_redis, namespace) == {"k"}, PATIENCE)
        await until(lambda: there.mode == "redis" and there.waiting("k") == 1, PATIENCE)
        gate.set()
        assert await asyncio.gather(running, sharer) == ["K", "K"]
        await asyncio.gather(here.stop(), there.stop())

    run(scenario)
    assert namespace_keys(own_redis.url, namespace) == []


def test_the_history_recorder_never_stalls_the_job_loop_on_a_slow_redis(own_redis):
    pool = RedisPool(1, 1, 5.0, url=own_redis.url, namespace=f"t-{uuid4().hex[:12]}")
    recorder = Recorder(lambda: pool, interval=0.05, size=100)
    admin = redis.Redis.from_url(own_redis.url)
    lags: list[float] = []
    try:
        recorder.start()
        deadline = time.monotonic() + PATIENCE
        while len(recorder.samples()) < 2:  # sampling, Redis answering at once
            assert time.monotonic() < deadline
            time.sleep(0.01)
        admin.execute_command("CLIENT", "PAUSE", 800, "ALL")  # Redis answers in 0.8 s
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            lags.append(_job_loop_lag())
    finally:
        recorder.stop()
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
        asyncio.run(pool.stop())
    assert max(lags) < 0.3, f"the job loop stalled {max(lags):.2f} s"


def test_a_running_job_redis_lost_without_restarting_is_counted_again(make_pool, redis_server):
    """A failover to a replica that missed the last writes: no connection breaks, the job's
    keys are simply gone. The next beat (lease/3) counts the running job again."""
    here, there = make_pool(1, 1, 10.0), make_pool(1, 1, 10.0)
    gate, calls = threading.Event(), []
    namespace = here.namespace
    prefix = "{" + namespace + "}:"

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate, calls)))
        await until(lambda: here.running() == 1)
        with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
            client.delete(prefix + "job:k", prefix + "running", prefix + "callers")
        assert _running_keys(redis_server, namespace) == set()
        await until(lambda: _running_keys(redis_server, namespace) == {"k"})
        joiner = asyncio.create_task(there.run("k", "b", held("again", gate, calls)))
        await until(lambda: there.waiting("k") >= 1)
        gate.set()
        assert await asyncio.gather(running, joiner) == ["K", "K"]
        assert calls == ["K"]

    run(scenario)


def test_a_forward_clock_step_past_the_lease_is_survived_as_documented(make_pool, redis_server):
    """Redis's TIME jumping more than a lease ahead ends every lease at once (here: every
    lease set to have ended, the same effect). The bound in docs/cluster.md: holds are
    freed and sharers in other processes get RunnerLost; the job itself runs on, is counted
    again by its owner's next beat, and answers its own callers."""
    here, there = make_pool(1, 1, 10.0), make_pool(1, 1, 10.0)
    gate, calls = threading.Event(), []
    namespace = here.namespace

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate, calls)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
            procs = "{" + namespace + "}:procs"
            client.zadd(procs, dict.fromkeys(client.zrange(procs, 0, -1), 0))
        with pytest.raises(Exception) as lost:
            await sharer
        assert type(lost.value).__name__ == "RunnerLost"
        await until(lambda: _running_keys(redis_server, namespace) == {"k"})
        gate.set()
        assert await running == "K" and calls == ["K"]

    run(scenario)


def _step_clock(url: str, namespace: str, seconds: float) -> str:
    """Redis's clock stepping ``seconds`` forward (back if negative), as the scripts see it:
    every time the namespace keeps made that much earlier. The ``tick`` as left, to tell
    the next script."""
    prefix, step = "{" + namespace + "}:", round(seconds * 1000)
    with redis.Redis.from_url(url, decode_responses=True) as client:
        tick = str(int(client.get(prefix + "tick")) - step)
        client.set(prefix + "tick", tick, px=60_000)
        procs = client.zrange(prefix + "procs", 0, -1, withscores=True)
        client.zadd(prefix + "procs", {proc: end - step for proc, end in procs})
        for key in client.scan_iter(match=prefix + "job:*"):
            times = client.hmget(key, "qt", "st", "dl")
            for name, value in zip(("qt", "st", "dl"), times, strict=True):
                if value is not None and int(value) > 0:
                    client.hset(key, name, int(value) - step)
    return tick


def test_a_forward_clock_step_refuses_no_queued_job_before_its_wait(make_pool, redis_server):
    """Rule 3's wait is the time a call waited: Redis's clock stepping a minute forward
    (NTP) does not make every queued job wait too long at once, as leases do not end."""
    pool = make_pool(1, 1, 10.0)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate)))
        await until(lambda: pool.running() == 1)
        queued = asyncio.create_task(pool.run("q", "b", _answer))
        await until(lambda: pool.queued() == 1)
        tick = _step_clock(redis_server.url, pool.namespace, 60.0)
        with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
            await until(lambda: client.get("{" + pool.namespace + "}:tick") != tick)
        assert pool.queued() == 1  # the script that read the step kept the job queued
        assert not queued.done(), queued.exception()
        gate.set()
        assert await asyncio.gather(running, queued) == ["K", 42]

    run(scenario)


def test_a_backward_clock_step_keeps_a_queued_jobs_wait(make_pool, redis_server):
    """Redis's clock stepping a minute back does not make a queued job wait a minute more
    than ``wait`` (rule 3)."""
    pool = make_pool(1, 1, 0.5)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate)))
        await until(lambda: pool.running() == 1)
        queued = asyncio.create_task(pool.run("q", "b", _answer))
        await until(lambda: pool.queued() == 1)
        _step_clock(redis_server.url, pool.namespace, -60.0)
        began = time.monotonic()
        with pytest.raises(PoolBusy):
            await asyncio.wait_for(queued, PATIENCE)
        assert time.monotonic() - began < 0.5 + 2.0
        gate.set()
        assert await running == "K"

    run(scenario)


def test_a_refusal_counted_first_after_a_stall_ends_no_lease(own_redis):
    """Redis stalls (SIGSTOP) for longer than the lease, and the first script it runs when
    it resumes counts a door's refusal: the stall still ends no lease (the running job's
    sharer elsewhere gets its result), as when a beat runs first."""
    lease = 1.5
    make = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0]
    here, there = (make(1, 1, 10.0, lease=lease, timeout=5.0) for _ in range(2))
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        there.count_refusal(queue_full(1.0))  # its script loaded, a connection idle
        await until(lambda: there.snapshot().counters.refused_busy == 1)
        own_redis.pause()
        stalled = time.monotonic()
        try:
            there.count_refusal(queue_full(1.0))  # the first script Redis reads on resuming
            await until(lambda: time.monotonic() - stalled > lease + lease / 3 + 0.2)
        finally:
            own_redis.resume()
        gate.set()
        assert await asyncio.gather(running, sharer) == ["K", "K"]
        await asyncio.gather(here.stop(), there.stop())

    run(scenario)


def test_reads_from_another_thread_while_the_pool_stops_never_crash(make_pool):
    """A status page read during a rolling restart: the read answers (from Redis, or from
    this process's figures), it never dies on a connection closed under it."""
    for _ in range(20):
        assert _errors_reading_while_stopping(make_pool(1, 1, 5.0)) == []


def test_one_dropped_connection_is_not_redis_failing(make_pool, redis_server, caplog):
    """Redis closing a client (CLIENT KILL, its idle `timeout`, a proxy) breaks one call at
    most; a fresh connection answers, so the pool stays coordinated and warns nobody."""
    pool = make_pool(1, 1, 5.0)

    async def scenario():
        assert await pool.run("a", "c", _answer) == 42  # connections made, now idle
        with redis.Redis.from_url(redis_server.url) as admin:
            admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        answers = []
        for key in ("b", "c", "d"):
            with contextlib.suppress(CoordinatorUnavailable):  # at most one call is lost
                answers.append(await pool.run(key, "c", _answer))
        assert len(answers) >= 2 and pool.mode == "redis"

    run(scenario)
    assert "failed" not in caplog.text


def test_a_finish_dropped_with_its_connection_frees_the_slot_at_once(own_redis):
    """A job's finish script is dropped before it runs (its connection closed under it):
    the job's own caller has its result, and the process, finding Redis answering, tells
    it at once what it runs (nothing), so Redis ends the job it still counts there: its
    slot and its caller are free, its sharer elsewhere hears within a beat or two, not a
    lease later (when the idle process would leave Redis)."""
    lease = 6.0
    make = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0]
    here, there = (make(1, 1, 10.0, lease=lease, timeout=3.0) for _ in range(2))
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        own_redis.hold_writes(10_000)
        try:
            gate.set()  # the job ends: its finish waits in Redis, not run
            await until(lambda: own_redis.blocked() == 1)
            own_redis.drop_clients("normal", "pubsub")
        finally:
            own_redis.release_writes()
        assert await running == "K"
        began = time.monotonic()
        with pytest.raises(RunnerLost):
            await sharer
        assert time.monotonic() - began < lease / 2
        assert await there.run("j", "a", _answer) == 42  # the slot and the caller are free
        assert time.monotonic() - began < lease / 2
        await asyncio.gather(here.stop(), there.stop())

    run(scenario)


def test_a_result_the_beat_takes_while_a_collect_is_on_its_way_reaches_the_sharer(
    make_pool, redis_server
):
    """A sharer's process reads a finished job's result once, by whichever of its beat and
    its collect (on the job's ``done``) runs first: the beat taking it while the collect
    is still on its way (a slow link) answers the sharer, not the collect finding nothing
    ("expired")."""
    here = make_pool(1, 1, 10.0)
    proxy = HoldingProxy(redis_server.port)
    url = f"redis://127.0.0.1:{proxy.port}/0"
    there = RedisPool(1, 1, 10.0, url=url, namespace=here.namespace, lease=LEASE)
    gate = threading.Event()
    results = "{" + here.namespace + "}:res:*"

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        proxy.marker = hashlib.sha1(SOURCES["collect"].encode()).hexdigest().encode()
        gate.set()
        assert await running == "K"
        await until(proxy.held.is_set)  # the collect on the way
        with redis.Redis.from_url(redis_server.url) as client:
            await until(lambda: not list(client.scan_iter(match=results)), PATIENCE)  # beat
        proxy.released.set()
        assert await asyncio.wait_for(sharer, PATIENCE) == "K"

    async def stop() -> None:
        await there.stop()

    try:
        run(scenario)
    finally:
        proxy.released.set()
        run(stop)
        proxy.close()


def test_a_reading_waits_no_longer_than_the_timeout_for_a_silent_redis(own_redis):
    """A door's or status page's reading of a Redis that stopped answering gives up after
    REDIS["TIMEOUT"] (then this process's own figures), not after twice that."""
    timeout = 1.0
    pool = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0](1, 1, 10.0, timeout=timeout)
    assert pool.pressure("k", "c").free == 2  # connected
    own_redis.pause()
    try:
        began = time.monotonic()
        assert pool.pressure("k", "c").free == 2
        assert time.monotonic() - began < 1.5 * timeout
    finally:
        own_redis.resume()
    run(pool.stop)


def test_back_after_a_restart_a_process_admits_only_once_redis_counts_its_jobs(own_redis):
    """Redis comes back empty under a running job: the process's first beat counts it again
    before any call of the process is admitted (the beat on a slow link here), so a new
    call queues behind it instead of taking its slot (two running at SLOTS 1)."""
    proxy = HoldingProxy(own_redis.port)
    url = f"redis://127.0.0.1:{proxy.port}/0"
    pool = RedisPool(1, 1, 10.0, url=url, namespace=f"t-{uuid4().hex[:12]}", lease=3.0)
    gate, calls = threading.Event(), []

    def started(key: str) -> bool:
        return key in calls

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate, calls)))
        await until(lambda: _own_jobs(pool) == [("k", "running")])
        own_redis.kill()
        await until(lambda: pool.mode == "refusing", PATIENCE)
        proxy.marker = hashlib.sha1(SOURCES["beat"].encode()).hexdigest().encode()
        own_redis.start()  # empty
        await until(lambda: pool.mode == "redis" and proxy.held.is_set(), PATIENCE)
        new = asyncio.create_task(pool.run("j", "b", held("J", gate, calls)))
        with contextlib.suppress(AssertionError):  # a call admitted before the beat starts
            await until(lambda: started("J"), 0.5)
        proxy.released.set()
        await until(lambda: started("J") or pool.queued() == 1, PATIENCE)
        assert calls == ["K"], "a new call took the slot of the job Redis had lost"
        gate.set()
        assert await asyncio.gather(running, new) == ["K", "J"]
        await pool.stop()

    try:
        run(scenario)
    finally:
        proxy.released.set()
        proxy.close()


def test_the_local_fallback_tells_the_door_the_sizes_it_was_told(own_redis):
    """While Redis fails the door reads the fallback pool, which knows each job's size as
    the local pool does: one running since Redis mode, one started in the fallback."""
    pool = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0](2, 2, 10.0, fallback="local")
    gate, calls = threading.Event(), []

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate, calls), size=1234))
        await until(lambda: pool.running() == 1 and calls == ["K"])
        own_redis.kill()
        await until(lambda: pool.mode == "local-fallback")
        assert pool.pressure().sizes == (1234,)
        other = asyncio.create_task(pool.run("j", "b", held("J", gate, calls), size=99))
        await until(lambda: calls == ["K", "J"])
        assert sorted(pool.pressure().sizes or ()) == [99, 1234]
        gate.set()
        assert await asyncio.gather(running, other) == ["K", "J"]
        await pool.stop()

    run(scenario)


def test_a_job_counted_again_after_redis_restarts_empty_keeps_its_size(own_redis):
    """The owner's beat counts its running job again with the size it was admitted with:
    the door still reads it, and a caller's Retry-After still weighs it."""
    namespace = f"t-{uuid4().hex[:12]}"
    pool = pools_in(own_redis, namespace)[0](1, 1, 10.0)
    gate, calls = threading.Event(), []

    async def scenario():
        running = asyncio.create_task(pool.run("k", "a", held("K", gate, calls), size=1234))
        await until(lambda: _own_jobs(pool) == [("k", "running")])
        assert pool.pressure().sizes == (1234,)
        own_redis.restart()  # empty
        await until(lambda: _running_keys(own_redis, namespace) == {"k"}, PATIENCE)
        await until(lambda: pool.mode == "redis", PATIENCE)
        assert pool.pressure().sizes == (1234,)
        gate.set()
        assert await running == "K"
        await pool.stop()

    run(scenario)


class ThrottledProxy:
    """A TCP proxy to Redis passing at most ``rate`` bytes a second each way on each
    connection: a slow link between a worker and Redis (a cross-host hop)."""

    def __init__(self, port: int, rate: float) -> None:
        self.upstream, self.rate = ("127.0.0.1", port), rate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # closed
            while True:
                client = self.listener.accept()[0]
                server = socket.create_connection(self.upstream)
                self.sockets += [client, server]
                for pair in ((client, server), (server, client)):
                    threading.Thread(target=self._pump, args=pair, daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(16384):
                time.sleep(len(data) / self.rate)
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def test_a_large_result_reaches_a_sharer_elsewhere_over_a_slow_link(redis_server, namespace):
    """An outcome within ``max_result_bytes`` crosses a link too slow to carry it within
    REDIS["TIMEOUT"], or within a lease (it goes in pieces): the sharer in the other process
    gets it, neither process takes Redis for failing, and nothing is left in Redis."""
    proxy = ThrottledProxy(redis_server.port, rate=4e6)  # 4 MB/s: 32 Mbit/s
    url = f"redis://127.0.0.1:{proxy.port}/0"
    here, there = (RedisPool(1, 1, 10.0, url=url, namespace=namespace, lease=1.0) for _ in "ab")
    result = "x" * (6 << 20)  # 1.5 s each way at 4 MB/s; within the default 16 MiB
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held(result, gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        gate.set()
        assert await running == result
        assert await asyncio.wait_for(sharer, PATIENCE) == result
        assert (here.mode, there.mode) == ("redis", "redis")
        assert here.cluster_snapshot().unreachable == there.cluster_snapshot().unreachable == 0
        await asyncio.gather(here.stop(), there.stop())

    try:
        run(scenario)
    finally:
        proxy.close()
    assert namespace_keys(redis_server.url, namespace) == []


def test_an_admission_whose_reply_a_dropped_connection_lost_holds_nothing(redis_server):
    """The admit script ran (a job started, its slot and caller taken), then its connection
    closed before the reply came: the caller gets CoordinatorUnavailable, and the process,
    finding Redis answering, tells it at once what it runs (not that job): its slot and
    its caller are free for the next call, not held for a lease."""
    lease = 6.0
    proxy = ReplyCutter(redis_server.port)
    namespace = f"t-{uuid4().hex[:12]}"
    url = f"redis://127.0.0.1:{proxy.port}/0"
    pool = RedisPool(1, 1, 10.0, url=url, namespace=namespace, lease=lease, timeout=3.0)

    async def scenario():
        assert await pool.run("w", "c", _answer) == 42  # connected, the scripts loaded
        proxy.marker = hashlib.sha1(SOURCES["admit"].encode()).hexdigest().encode()
        with pytest.raises(CoordinatorUnavailable):
            await pool.run("k", "c", _answer)
        assert proxy.cut.is_set()
        began = time.monotonic()
        await until(lambda: _running_keys(redis_server, namespace) == set(), lease / 2)
        assert await pool.run("j", "c", _answer) == 42  # the caller is free
        assert time.monotonic() - began < lease / 2
        assert pool.mode == "redis"
        await pool.stop()

    try:
        run(scenario)
    finally:
        proxy.close()
    assert namespace_keys(redis_server.url, namespace) == []


def test_a_sharer_waits_a_lease_from_its_join_for_redis_to_come_back(own_redis):
    """A process idle for a while joins a job of another process, then Redis goes away: its
    sharer waits a lease from the last time Redis answered this process (the join), not from
    the last beat of the process's past work, before it is told CoordinatorUnavailable."""
    lease = 3.0
    make = pools_in(own_redis, f"t-{uuid4().hex[:12]}")[0]
    here, there = (make(1, 1, 10.0, lease=lease) for _ in range(2))
    gate = threading.Event()
    procs = "{" + here.namespace + "}:procs"

    async def scenario():
        assert await there.run("w", "b", _answer) == 42
        with redis.Redis.from_url(own_redis.url, decode_responses=True) as client:
            await until(lambda: client.zscore(procs, there.process) is None, 3 * lease)  # idle
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        joined_at = time.monotonic()
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: there.waiting("k") == 1)
        own_redis.kill()
        with pytest.raises(CoordinatorUnavailable):
            await asyncio.wait_for(sharer, PATIENCE)
        assert time.monotonic() - joined_at >= lease
        gate.set()
        assert await running == "K"
        await asyncio.gather(here.stop(), there.stop())

    run(scenario)


@pytest.mark.parametrize("keep_data", [False, True])
def test_a_queued_job_and_a_sharer_elsewhere_are_answered_across_a_quick_restart(
    own_redis, keep_data
):
    """Redis restarts (empty, or with its data) while a job runs, one is queued behind it
    and another process shares the running one: every caller is answered, never left
    hanging (the queued one refused unavailable; the sharer, when the job ended while its
    process was away from Redis, gets RunnerLost), and afterwards no slot or place is held."""
    namespace = f"t-{uuid4().hex[:12]}"
    make = pools_in(own_redis, namespace)[0]
    here, there = make(1, 1, None), make(1, 1, None)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: _own_jobs(here) == [("k", "running")])
        queued = asyncio.create_task(here.run("q", "b", _answer))
        sharer = asyncio.create_task(there.run("k", "c", None))
        await until(lambda: here.queued() == 1 and there.waiting("k") == 1)
        own_redis.restart(keep_data=keep_data)
        gate.set()
        outcomes = await asyncio.wait_for(
            asyncio.gather(running, queued, sharer, return_exceptions=True), 3 * LEASE + 5
        )
        assert outcomes[0] == "K", outcomes
        assert outcomes[1] == 42 or isinstance(outcomes[1], CoordinatorUnavailable), outcomes
        assert outcomes[2] == "K" or isinstance(outcomes[2], RunnerLost), outcomes
        await until(lambda: here.mode == there.mode == "redis", 3 * LEASE + 5)
        await until(lambda: here.running() == 0 and here.queued() == 0, 3 * LEASE + 5)
        assert await here.run("n", "a", _answer) == 42
        await asyncio.gather(here.stop(), there.stop())

    run(scenario)
    assert namespace_keys(own_redis.url, namespace) == []


@pytest.mark.parametrize("ran", [True, False])
def test_a_queued_job_left_by_its_caller_whose_leave_was_cut_is_dropped_once(own_redis, ran):
    """The only caller of a queued job leaves and the connection closes under leave.lua,
    after Redis ran it (``ran``: its reply lost) or before (Redis did not know the script
    yet): ``on_drop`` runs once and ``fn`` never, the queue's place is free, and the job
    is counted abandoned, as without the fault."""
    lease = 3.0
    proxy = ReplyCutter(own_redis.port)
    namespace = f"t-{uuid4().hex[:12]}"
    url = f"redis://127.0.0.1:{proxy.port}/0"
    pool = RedisPool(1, 1, None, url=url, namespace=namespace, lease=lease, timeout=3.0)
    gate, calls, drops = threading.Event(), [], []
    if ran:
        with own_redis.client() as client:
            client.script_load(SOURCES["leave"])

    async def scenario():
        running = asyncio.create_task(pool.run("a", "a", held("A", gate)))
        await until(lambda: pool.running() == 1)
        queued = asyncio.create_task(
            pool.run("q", "q", held("Q", gate, calls), on_drop=lambda: drops.append(1))
        )
        await until(lambda: pool.queued() == 1)
        proxy.marker = hashlib.sha1(SOURCES["leave"].encode()).hexdigest().encode()
        queued.cancel()
        await until(lambda: proxy.cut.is_set() and pool.queued() == 0)
        await until(lambda: drops == [1], lease)
        await until(lambda: pool.local_snapshot().counters[Counter.ABANDONED] == 1, lease)
        gate.set()
        assert await running == "A"
        await pool.stop()

    try:
        run(scenario)
    finally:
        proxy.close()
    assert (calls, drops) == ([], [1])
    assert namespace_keys(own_redis.url, namespace) == []
