"""RedisPool in one process: the codec, several pools sharing a namespace as several
processes would (each pool has its own process id, channel and lease), wake-ups,
the beat's catch-up, snapshots, ownership, closing, and Redis failing.

The rules themselves are pinned by tests/test_pool_conformance.py, run a second
time against RedisPool (see the Makefile); the cross-process behaviour with real
OS processes is in test_redis_cluster.py."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import pytest
import redis

from django_pdfpool.admission import RedisPool
from django_pdfpool.admission.history import Recorder
from django_pdfpool.admission.jobs import get_job_loop
from django_pdfpool.admission.redis.codec import decode_outcome, encode_outcome
from django_pdfpool.admission.redis.link import PIECE, Event
from django_pdfpool.exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    ExtractionError,
    PoolBusy,
    PoolClosed,
    RemoteJobError,
    ResultTooLarge,
)
from tests.conftest import held, until
from tests.support.outages import _answer
from tests.support.redis_server import namespace_keys, pools_in

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(60)


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 30))


def on_job_loop(coroutine) -> None:
    asyncio.run_coroutine_threadsafe(coroutine, get_job_loop()).result(5)


class Odd(Exception):
    """Not a builtin, not ours: cannot be rebuilt in another process."""


@dataclass(frozen=True)
class Item:
    name: str
    pages: list[str]


# --- the codec ----------------------------------------------------------------


def roundtrip(error: BaseException) -> BaseException:
    result, rebuilt = decode_outcome(encode_outcome(None, error, limit=1 << 20))
    assert result is None and rebuilt is not None
    return rebuilt


def test_builtin_and_package_errors_come_back_as_themselves():
    lookup = roundtrip(LookupError("no such page", 3))
    assert type(lookup) is LookupError and lookup.args == ("no such page", 3)
    missing = roundtrip(FileNotFoundError(2, "gone"))
    assert type(missing) is FileNotFoundError and missing.errno == 2
    extraction = roundtrip(ExtractionError("encrypted", detail="aes", elapsed=0.5, peak_rss=7))
    assert type(extraction) is ExtractionError
    assert (extraction.code, extraction.detail, extraction.elapsed) == ("encrypted", "aes", 0.5)
    assert str(extraction) == str(ExtractionError("encrypted"))
    busy = roundtrip(PoolBusy("full", 2.5))
    assert type(busy) is PoolBusy and busy.retry_after == 2.5 and busy.code == "busy"


def test_other_errors_become_a_remote_job_error_naming_type_and_message():
    error = roundtrip(Odd("strange"))
    assert type(error) is RemoteJobError
    assert error.type_name.endswith("test_pool.Odd") and error.message == "strange"
    assert "Odd" in str(error) and "strange" in str(error)
    _, forged = decode_outcome(json.dumps({"error": {"module": "os", "name": "system"}}))
    assert type(forged) is RemoteJobError  # nothing outside builtins and ours is imported


def test_results_travel_as_bounded_json():
    assert decode_outcome(encode_outcome({"a": [1]}, None, limit=1024)) == ({"a": [1]}, None)
    _, error = decode_outcome(encode_outcome("é" * 600, None, limit=1024))  # bytes, not chars
    assert isinstance(error, ResultTooLarge)
    _, error = decode_outcome(encode_outcome(object(), None, limit=1024))
    assert type(error) is RemoteJobError and "JSON" in error.message


@pytest.mark.parametrize(
    "options",
    [
        dict(lease=0),
        dict(namespace=""),
        dict(namespace="a{b}"),
        dict(fallback="ignore"),
        dict(max_result_bytes=10),
        dict(timeout=0),
        dict(slots=0),
    ],
)
def test_rejects_impossible_options(options):
    args = dict(url="redis://127.0.0.1:1/0", namespace="n", slots=1)
    args.update(options)
    with pytest.raises(ValueError):
        RedisPool(**args)


# --- across pools (processes) --------------------------------------------------


def test_a_sharer_elsewhere_gets_the_result_through_the_codec_hooks(
    make_pool, redis_server, namespace
):
    hooks = dict(encode=asdict, decode=lambda value: Item(**value))
    here, there = make_pool(**hooks), make_pool(**hooks)
    gate, item = threading.Event(), Item("doc", ["one", "two"])

    async def scenario():
        starter = asyncio.create_task(here.run("k", "a", held(item, gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: here.waiting("k") == 1)
        gate.set()
        assert await starter is item  # this process's sharers get the object itself
        assert await sharer == item
        left = namespace_keys(redis_server.url, namespace)
        assert [key for key in left if ":res:" in key] == []  # read once, then deleted

    run(scenario)


def test_errors_reach_sharers_in_other_processes(make_pool):
    here, there = make_pool(), make_pool()

    async def scenario():
        for raised, expected in (
            (LookupError("no such page"), LookupError),
            (ExtractionError("malformed", detail="xref"), ExtractionError),
            (Odd("strange"), RemoteJobError),
        ):
            gate = threading.Event()

            async def failing(gate=gate, raised=raised):
                while not gate.is_set():
                    await asyncio.sleep(0.002)
                raise raised

            starter = asyncio.create_task(here.run("k", "a", failing))
            await until(lambda: here.running() == 1)
            sharer = asyncio.create_task(there.run("k", "b", None))
            await until(lambda: here.waiting("k") == 1)
            gate.set()
            with pytest.raises(type(raised)):
                await starter
            with pytest.raises(expected) as caught:
                await sharer
            assert str(raised) in str(caught.value)

    run(scenario)


def test_a_result_too_large_to_travel_reaches_only_its_own_process(make_pool):
    here, there = make_pool(max_result_bytes=1024), make_pool(max_result_bytes=1024)
    gate = threading.Event()

    async def scenario():
        starter = asyncio.create_task(here.run("k", "a", held("x" * 5000, gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: here.waiting("k") == 1)
        gate.set()
        assert await starter == "x" * 5000
        with pytest.raises(ResultTooLarge):
            await sharer

    run(scenario)


def test_a_slot_freed_in_one_process_starts_a_job_queued_in_another_at_once(make_pool):
    # A long lease: the beat (every lease/3) is far off, so only pub/sub can be this fast.
    here, there = make_pool(1, 1, 10.0, lease=30.0), make_pool(1, 1, 10.0, lease=30.0)
    gate, started = threading.Event(), []

    async def queued_job():
        started.append(time.monotonic())
        return "B"

    async def scenario():
        first = asyncio.create_task(here.run("a", "c1", held("A", gate)))
        await until(lambda: here.running() == 1)
        second = asyncio.create_task(there.run("b", "c2", queued_job))
        await until(lambda: here.queued() == 1)
        with pytest.raises(PoolBusy):
            await here.run("c", "c3", held("C", gate))  # one slot, one place: full
        with pytest.raises(CallerBusy):
            await there.run("d", "c1", held("D", gate))  # c1 is busy in the other pool
        gate.set()
        assert await first == "A"
        ended = time.monotonic()
        assert await second == "B"
        assert started[0] - ended < 0.2

    run(scenario)


def test_a_lost_wake_up_is_caught_up_by_the_beat(make_pool):
    lease = 0.6  # a beat every 0.2 s
    here, there = make_pool(1, 1, 10.0, lease=lease), make_pool(1, 1, 10.0, lease=lease)
    gate = threading.Event()

    async def scenario():
        first = asyncio.create_task(here.run("a", "c1", held("A", gate)))
        await until(lambda: here.running() == 1)
        queued = asyncio.create_task(there.run("b", "c2", held("B", gate)))
        sharer = asyncio.create_task(there.run("a", "c3", None))
        await until(lambda: here.queued() == 1 and here.waiting("a") == 1)
        on_job_loop(there._side.link.unsubscribe())  # `start` and `done` will be missed
        gate.set()
        began = time.monotonic()
        assert await asyncio.gather(first, sharer, queued) == ["A", "A", "B"]
        assert time.monotonic() - began < lease  # within a beat or two, not a hang

    run(scenario)


def test_a_lost_done_for_an_outcome_in_pieces_is_caught_up_by_the_beat(make_pool):
    lease = 0.6  # a beat every 0.2 s
    here, there = make_pool(1, 1, 10.0, lease=lease), make_pool(1, 1, 10.0, lease=lease)
    gate, result = threading.Event(), "é" * (3 * PIECE // 2 + 1)  # 4 pieces, cut in a character

    async def scenario():
        first = asyncio.create_task(here.run("a", "c1", held(result, gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("a", "c2", None))
        await until(lambda: here.waiting("a") == 1)
        on_job_loop(there._side.link.unsubscribe())  # `done` will be missed
        gate.set()
        began = time.monotonic()
        assert await asyncio.gather(first, sharer) == [result, result]
        assert time.monotonic() - began < lease  # within a beat or two, not a hang

    run(scenario)


def test_a_beat_does_not_end_a_job_admitted_after_it_took_its_arguments(make_pool):
    pool = make_pool(1, 1, 10.0)
    gate = threading.Event()

    async def scenario():
        task = asyncio.create_task(pool.run("k", "c", held("r", gate)))
        await until(lambda: pool.running() == 1)
        # A beat whose arguments were taken before this admission (knowing job 0 at most)
        # reaches Redis after it: the job is not judged a leftover.
        on_job_loop(pool._side.link.call("beat", "0", "0"))
        assert pool.running() == 1
        gate.set()
        assert await task == "r"

    run(scenario)


def test_no_key_outlives_its_job_by_more_than_the_lease(make_pool, redis_server, namespace):
    here, there = make_pool(lease=0.5), make_pool(lease=0.5)
    gate = threading.Event()

    async def scenario():
        starter = asyncio.create_task(here.run("k", "a", held("r", gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("k", "b", None))
        await until(lambda: here.waiting("k") == 1)
        gate.set()
        assert await asyncio.gather(starter, sharer) == ["r", "r"]
        left = namespace_keys(redis_server.url, namespace)
        assert all(key.endswith((":procs", ":terms", ":tick")) for key in left), (
            left
        )  # no job, no result
        await until(lambda: namespace_keys(redis_server.url, namespace) == [], timeout=1.5)

    run(scenario)


def test_the_cluster_snapshot_names_the_processes_holding_jobs(make_pool):
    here, there = make_pool(1, 2, 10.0), make_pool(1, 2, 10.0)
    gate = threading.Event()

    async def scenario():
        first = asyncio.create_task(here.run("k1", "c1", held(1, gate)))
        await until(lambda: here.running() == 1)
        second = asyncio.create_task(there.run("k2", "c2", held(2, gate)))
        sharer = asyncio.create_task(there.run("k1", "c3", None))
        await until(lambda: here.queued() == 1 and here.waiting("k1") == 1)
        seen = here.cluster_snapshot()
        assert (seen.mode, seen.process) == ("redis", here.process)
        assert (seen.cluster.running, seen.cluster.queued) == (1, 1)
        assert [job.key for job in seen.local.jobs] == ["k1"]
        holders = {hold.process: hold for hold in seen.processes}
        assert holders[here.process].running == ("k1",)
        assert holders[there.process].queued == ("k2",)
        assert holders[there.process].waiting == 2 and holders[here.process].waiting == 1
        assert here.snapshot() == seen.cluster or here.snapshot().running == 1
        json.dumps(dataclasses.asdict(seen))
        gate.set()
        assert await asyncio.gather(first, second, sharer) == [1, 2, 1]

    run(scenario)


class Owner:
    def __init__(self) -> None:
        self.ran = self.dropped = 0

    async def fn(self):
        self.ran += 1
        return "r"

    def on_drop(self) -> None:
        self.dropped += 1


def test_exactly_one_of_fn_and_on_drop_on_every_path(make_pool):
    here, there = make_pool(1, 1, 0.3), make_pool(1, 1, 0.3)
    gate = threading.Event()

    async def scenario():
        first = asyncio.create_task(here.run("a", "c1", held("A", gate)))
        await until(lambda: here.running() == 1)
        joined, refused, left, expired = Owner(), Owner(), Owner(), Owner()
        sharer = asyncio.create_task(there.run("a", "c2", joined.fn, on_drop=joined.on_drop))
        await until(lambda: here.waiting("a") == 1)
        with pytest.raises(CallerBusy):
            await there.run("z", "c1", refused.fn, on_drop=refused.on_drop)
        leaving = asyncio.create_task(there.run("b", "c3", left.fn, on_drop=left.on_drop))
        await until(lambda: here.queued() == 1)
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        assert here.queued() == 0
        with pytest.raises(PoolBusy):
            await there.run("c", "c4", expired.fn, on_drop=expired.on_drop)  # waits 0.3 s
        gate.set()
        assert await asyncio.gather(first, sharer) == ["A", "A"]
        for owner in (joined, refused, left, expired):
            assert (owner.ran, owner.dropped) == (0, 1)

    run(scenario)


def test_closing_is_per_process_and_stop_reaches_sharers_elsewhere(make_pool):
    here, there = make_pool(2, 2, 10.0), make_pool(2, 2, 10.0)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("a", "c1", held("A", gate)))
        await until(lambda: here.running() == 1)
        sharer = asyncio.create_task(there.run("a", "c2", None))
        await until(lambda: here.waiting("a") == 1)
        await here.stop()
        for task in (running, sharer):
            with pytest.raises(PoolClosed):
                await task
        with pytest.raises(PoolClosed):
            await here.run("b", "c3", held("B", gate))
        gate.set()
        assert await there.run("b", "c3", held("B", gate)) == "B"  # the other goes on
        await there.drain()
        with pytest.raises(PoolClosed):
            await there.run("b", "c3", held("B", gate))

    run(scenario)


@pytest.mark.parametrize("after_its_list", [False, True])
def test_a_slot_freed_while_a_process_stops_starts_none_of_its_jobs(make_pool, after_its_list):
    """A queued job's `start` reaching its process once stop() began (before or after stop
    took its list of jobs to drop): the job is dropped, never run, nor left running for
    stop() to wait on. The `start` is held back (unsubscribed, no beat within the lease)
    and delivered then."""
    here, there = make_pool(1, 1, None, lease=60.0), make_pool(1, 1, None, lease=60.0)
    gate, never, ran = threading.Event(), threading.Event(), []
    loop = get_job_loop()

    async def scenario():
        first = asyncio.create_task(here.run("a", "c1", held("A", gate)))
        await until(lambda: here.running() == 1)
        queued = asyncio.create_task(there.run("b", "c2", held("B", never, ran)))
        await until(lambda: here.queued() == 1)
        on_job_loop(there._side.link.unsubscribe())
        gate.set()
        assert await first == "A"
        await until(lambda: here.queued() == 0)  # Redis gave "b" the slot: `start` was sent
        (job,) = there._side.jobs()
        assert job.state == "queued"  # the `start` was missed
        start = Event("start", "b", job.id)
        hold = threading.Event()
        loop.call_soon_threadsafe(hold.wait, 5)  # the job loop waits while stop() begins
        stopping = asyncio.create_task(there.stop())
        await asyncio.sleep(0)  # stop() began: its part on the job loop is queued there
        if after_its_list:  # queued behind stop()'s first step on the job loop
            loop.call_soon_threadsafe(loop.call_soon, there._side._on_event, start)
        else:
            loop.call_soon_threadsafe(there._side._on_event, start)
        hold.set()
        try:
            await asyncio.wait_for(stopping, 5)
        finally:
            never.set()
        with pytest.raises(PoolClosed):
            await queued
        counters = there.local_snapshot().counters
        assert (ran, counters.started, counters.cancelled) == ([], 0, 0)
        assert (here.running(), here.queued()) == (0, 0)

    run(scenario)


# --- Redis failing --------------------------------------------------------------


@pytest.mark.parametrize("fallback", ["refuse", "local"])
def test_redis_failing_and_coming_back(own_redis, namespace, caplog, fallback):
    make, _ = pools_in(own_redis, namespace)
    pool = make(1, 1, 10.0, fallback=fallback)
    gate, dropped = threading.Event(), []
    caplog.set_level(logging.WARNING, logger="django_pdfpool.redis")

    async def scenario():
        running = asyncio.create_task(pool.run("a", "c1", held("A", gate)))
        await until(lambda: pool.running() == 1)
        queued = asyncio.create_task(
            pool.run("b", "c2", held("B", gate), on_drop=lambda: dropped.append("b"))
        )
        await until(lambda: pool.queued() == 1)
        own_redis.kill()
        began = time.monotonic()
        if fallback == "refuse":
            with pytest.raises(CoordinatorUnavailable) as refused:
                await pool.run("c", "c3", held("C", gate))
            assert refused.value.code == "unavailable" and refused.value.retry_after > 0
            assert pool.mode == "refusing"
            again = time.monotonic()
            with pytest.raises(PoolBusy):  # what `except PoolBusy` (503) code expects
                await pool.run("d", "c4", held("D", gate))
            assert time.monotonic() - again < 0.05  # no Redis call while refusing
        else:
            gate.set()
            assert await pool.run("c", "c3", held("C", gate)) == "C"  # this process's pool
            assert pool.mode == "local-fallback"
            assert pool.cluster_snapshot().mode == "local-fallback"
        assert time.monotonic() - began < 1.0
        with pytest.raises(CoordinatorUnavailable):  # queued: its place was in Redis
            await queued
        assert dropped == ["b"]
        gate.set()
        assert await running == "A"  # a running job still answers its caller
        assert "failed" in caplog.text
        own_redis.start()
        await until(lambda: pool.mode == "redis", timeout=3)
        assert "back" in caplog.text
        assert await pool.run("e", "c5", held("E", gate)) == "E"
        await pool.drain()
        assert namespace_keys(own_redis.url, namespace) == []

    run(scenario)


def test_close_refuses_new_calls_and_lets_running_jobs_finish(make_pool):
    async def scenario():
        pool = make_pool(1, 1, 5.0)
        release = threading.Event()  # the job runs on the job loop's thread

        async def held():
            while not release.is_set():
                await asyncio.sleep(0.005)
            return "done"

        running = asyncio.create_task(pool.run("k", "a", held))
        while pool.running() < 1:
            await asyncio.sleep(0.005)
        pool.close()
        with pytest.raises(PoolClosed):
            await pool.run("other", "b", held)
        release.set()
        assert await running == "done"

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_pressure_tells_a_busy_caller_as_run_would(make_pool):
    """``pressure(key, caller)``: one round trip says whether ``caller`` holds a job for
    another key anywhere (run would answer 429, with this Retry-After); a caller joining
    the key's own job, or holding nothing, is not busy."""
    here, there = make_pool(1, 2, 10.0), make_pool(1, 2, 10.0)
    gate = threading.Event()

    async def scenario():
        running = asyncio.create_task(here.run("k1", "c1", held("K1", gate)))
        await until(lambda: here.running() == 1)
        queued = asyncio.create_task(here.run("k2", "c2", held("K2", gate)))
        await until(lambda: here.queued() == 1)
        busy = there.pressure("other", "c1")
        assert busy.caller_busy and busy.caller_retry_after > 0 and not busy.in_flight
        with pytest.raises(CallerBusy) as refused:
            await there.run("other", "c1", held("X", gate))
        assert abs(refused.value.retry_after - busy.caller_retry_after) < 1.0
        behind = there.pressure("other", "c2")  # its job is queued: busy too, later free
        assert behind.caller_busy and behind.caller_retry_after >= busy.caller_retry_after
        assert not there.pressure("k1", "c1").caller_busy  # its own key: it would join
        assert not there.pressure("k1", "c9").caller_busy and there.pressure("k1").in_flight
        free = there.pressure("other", "nobody")
        assert (free.caller_busy, free.caller_retry_after, free.free) == (False, 0.0, 1)
        gate.set()
        assert await asyncio.gather(running, queued) == ["K1", "K2"]
        assert not there.pressure("other", "c1").caller_busy

    run(scenario)


def test_the_history_counts_the_clusters_refusals_between_two_samples(make_pool):
    """The status page's chart: refusals counted in Redis between two samples are that
    sample's (the cluster's start, read on Redis's clock each time, is the same books)."""
    pool = make_pool(1, 0, 10.0)
    recorder = Recorder(lambda: pool, size=10)
    gate = threading.Event()

    async def scenario() -> tuple[Any, Any]:
        task = asyncio.create_task(pool.run("k", "a", held(1, gate)))
        await until(lambda: pool.running() == 1)
        first = await asyncio.to_thread(recorder.sample)
        for n in range(3):
            with pytest.raises(PoolBusy):
                await pool.run(f"x{n}", f"c{n}", _answer)
        second = await asyncio.to_thread(recorder.sample)
        gate.set()
        await task
        return first, second

    first, second = run(scenario)
    assert pool.snapshot().counters.refused_busy == 3
    assert (first.refused, second.refused) == (0, 3)


def test_a_process_new_to_the_cluster_tells_retry_after_from_the_clusters_runs(make_pool):
    """A process that has run nothing refuses with the cluster's recent run times (2.5 s
    here), not the 1 s it would guess from its own empty books."""
    here, there, door = (make_pool(2, 0, 10.0) for _ in range(3))
    gate = threading.Event()

    async def slow(name: str):
        await asyncio.sleep(2.5)
        return name

    async def scenario():
        ran = [here.run(k, k, functools.partial(slow, k)) for k in ("a", "b")]
        assert await asyncio.gather(*ran) == ["a", "b"]
        running = [asyncio.create_task(here.run(k, k, held(k, gate))) for k in ("x", "y")]
        await until(lambda: here.running() == 2)
        with pytest.raises(PoolBusy) as told_here:
            await here.run("z", "c3", held("Z", gate))
        with pytest.raises(PoolBusy) as told_there:
            await there.run("z", "c4", held("Z", gate))
        assert told_there.value.retry_after >= 2.0, told_there.value.retry_after
        assert abs(told_there.value.retry_after - told_here.value.retry_after) < 0.5
        assert door.pressure("z", "c5").retry_after >= 2.0  # a door's reading, as new
        gate.set()
        assert await asyncio.gather(*running) == ["x", "y"]

    run(scenario)


def test_the_door_counts_the_queues_places_while_the_cluster_runs_beyond_its_slots(
    make_pool, redis_server
):
    """Redis lost a running job (a failover to a replica behind) and gave its slot away
    before the owner's beat counted it again: two jobs run on one slot (the documented
    bound). The queue's place is still free, as the local pool counts it (``hold``): the
    door reads one free place, and a new call is queued, not refused."""
    here, there = make_pool(1, 1, 10.0, lease=6.0), make_pool(1, 1, 10.0, lease=6.0)
    gate = threading.Event()
    prefix = "{" + here.namespace + "}:"

    async def scenario():
        assert await there.run("w", "b", _answer) == 42  # connected: admits at once below
        first = asyncio.create_task(here.run("k", "a", held("K", gate)))
        await until(lambda: here.running() == 1)
        with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
            client.delete(prefix + "job:k", prefix + "running", prefix + "callers")
            second = asyncio.create_task(there.run("j", "b", held("J", gate)))
            await until(lambda: client.smembers(prefix + "running") == {"k", "j"})
        assert there.pressure("x", "c").free == 1
        third = asyncio.create_task(there.run("x", "c", held("X", gate)))
        await until(lambda: there.queued() == 1)
        gate.set()
        assert await asyncio.gather(first, second, third) == ["K", "J", "X"]

    run(scenario)


@pytest.mark.parametrize("state", ["running", "queued"])
def test_a_caller_that_left_just_before_stop_is_not_counted_refused_closed(make_pool, state):
    """Its leaving not yet run (its loop had not got round to it), a cancelled caller got
    CancelledError, not a 503: stop() counts refused_closed for the others alone."""
    pool = make_pool(1, 1, None)
    gate = threading.Event()

    async def scenario():
        first = asyncio.create_task(pool.run("a", "ca", held("A", gate)))
        await until(lambda: pool.running() == 1)
        queued = asyncio.create_task(pool.run("b", "cb", held("B", gate)))
        await until(lambda: pool.queued() == 1)
        sharer = asyncio.create_task(pool.run("a" if state == "running" else "b", "cs", None))
        await until(lambda: sum(pool.waiting(key) for key in "ab") == 1)
        sharer.cancel()
        await pool.stop()  # before this loop runs the sharer's leaving
        answers = await asyncio.gather(first, queued, sharer, return_exceptions=True)
        assert [type(a) for a in answers] == [PoolClosed, PoolClosed, asyncio.CancelledError]
        return pool.local_snapshot().counters

    assert asyncio.run(asyncio.wait_for(scenario(), 60)).refused_closed == 2
