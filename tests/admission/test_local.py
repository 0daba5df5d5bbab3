"""The local pool beyond the conformance file: each queued job's own wait, wait=None, a fn that
returns no awaitable, the job loop (jobs on the pool's loop, waiters woken on theirs, many
threads and loops), no task or timer left behind, drain and stop, a base exception in a job or
a task it left behind, a forked child, and pressure while held jobs run past the slots."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from django_pdfpool.admission import Pool
from django_pdfpool.admission.jobs import get_job_loop
from django_pdfpool.exceptions import PoolBusy, PoolClosed
from tests.support.gates import LONG, Gate, job, run, until

QUICK = 0.5  # seconds: "at once" answers well within this


@pytest.fixture(autouse=True)
def _open_gates():
    yield
    for gate in Gate.made:
        gate.open()
    Gate.made.clear()


def eventually(read, expected, timeout=LONG):
    """Poll ``read()`` from a plain thread until it returns ``expected``."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.001)
    return value


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


def test_a_caller_that_left_before_its_wait_passed_is_not_counted_refused():
    # Its loop busy, a cancelled caller leaves only once its loop runs again: the wait
    # may pass meanwhile, and the caller, who got CancelledError, counted as refused busy.
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=0.3)  # passes while this loop is busy
        gate = Gate()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        left = asyncio.create_task(pool.run("b", "cb", job("B")))
        await until(lambda: pool.queued() == 1)
        left.cancel()
        deadline = time.monotonic() + LONG
        while pool.queued() and time.monotonic() < deadline:  # this loop busy meanwhile
            time.sleep(0.001)
        with pytest.raises(asyncio.CancelledError):
            await left
        gate.open()
        assert await held == "A"
        return pool.snapshot().counters

    counters = run(scenario)
    assert (counters.refused_busy, counters.abandoned) == (0, 1)


def test_a_slot_freed_after_every_caller_of_the_queued_job_left_does_not_run_it():
    # As above: left, but its loop not yet round to leaving when the slot frees.
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=None)
        gate, ran, dropped = Gate(), threading.Event(), threading.Event()
        held = asyncio.create_task(pool.run("a", "ca", job("A", gate)))
        await until(lambda: pool.running() == 1)
        left = asyncio.create_task(pool.run("b", "cb", job("B", None, ran), on_drop=dropped.set))
        await until(lambda: pool.queued() == 1)
        left.cancel()
        gate.open()
        deadline = time.monotonic() + LONG
        while not pool.idle() and time.monotonic() < deadline:  # this loop busy meanwhile
            time.sleep(0.001)
        assert await held == "A"
        with pytest.raises(asyncio.CancelledError):
            await left
        return pool.snapshot().counters, ran.is_set(), dropped.is_set()

    counters, ran, dropped = run(scenario)
    assert (ran, dropped, counters.started, counters.abandoned) == (False, True, 1, 1)


def test_a_caller_that_left_before_stop_is_not_counted_refused_closed():
    async def scenario():
        pool = Pool(slots=1, queue=1, wait=None)
        held = asyncio.create_task(pool.run("a", "ca", job("A", Gate())))
        await until(lambda: pool.running() == 1)
        left = asyncio.create_task(pool.run("b", "cb", job("B")))
        await until(lambda: pool.queued() == 1)
        left.cancel()
        await pool.stop()  # counts before this loop gets round to the left caller's leaving
        answers = await asyncio.gather(held, left, return_exceptions=True)
        assert [type(answer) for answer in answers] == [PoolClosed, asyncio.CancelledError]
        return pool.snapshot().counters

    assert run(scenario).refused_closed == 1  # the running job's caller alone


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


def test_a_job_stopped_before_its_tasks_first_step_still_sees_the_cancel():
    """stop() cancels what runs: a job counted running whose task has not taken its first
    step yet (the job loop busy) still enters its function and sees the cancel there."""
    seen, held, holding = threading.Event(), threading.Event(), threading.Event()

    async def fn():
        try:
            await asyncio.sleep(LONG)
        except asyncio.CancelledError:
            seen.set()
            raise

    def hold() -> None:  # the job loop busy until ``held`` is set
        holding.set()
        held.wait(LONG)

    async def scenario():
        pool = Pool(slots=1, queue=0, wait=LONG)
        get_job_loop().call_soon_threadsafe(hold)
        await until(holding.is_set)
        call = asyncio.create_task(pool.run("k", "c", fn))
        await until(lambda: pool.running() == 1)  # its task to be made on the held loop
        stopping = asyncio.create_task(pool.stop())
        await until(lambda: pool.snapshot().closed)  # the cancel queued behind the task
        held.set()
        await asyncio.wait_for(stopping, LONG)
        with pytest.raises(PoolClosed):
            await call
        assert seen.is_set()

    try:
        run(scenario)
    finally:
        held.set()


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


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a new interpreter: the job loop is one per process."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    "raised",
    [
        "KeyboardInterrupt",
        "SystemExit",
        "GeneratorExit",
        "BaseExceptionGroup('group', [KeyboardInterrupt()])",
    ],
)
def test_a_job_raising_a_base_exception_fails_with_job_fault_and_the_loop_runs_on(raised):
    child = run_script(
        f"""
        import asyncio
        from django_pdfpool.admission import Pool

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
    assert child.stdout.splitlines() == ["the caller got JobFault", "still working"], (
        child.stdout + child.stderr
    )


@pytest.mark.parametrize("escape", ["KeyboardInterrupt", "SystemExit"])
def test_what_a_task_left_behind_raises_does_not_stop_the_job_loop(escape):
    child = run_script(
        f"""
        import asyncio, threading
        from django_pdfpool.admission import Pool

        async def leaves_a_task_behind():
            async def behind():
                raise {escape}

            asyncio.get_running_loop().create_task(behind())
            await asyncio.sleep(0.05)  # the task raises meanwhile, on the job loop
            return "done"

        async def main():
            pool = Pool(slots=1, queue=0, wait=None)
            for key in "first", "second":
                try:
                    print(await asyncio.wait_for(pool.run(key, "a", leaves_a_task_behind), 5))
                except BaseException as exc:
                    print("got", type(exc).__name__)
            print("job loop alive", any(t.name == "pdfpool-jobs" for t in threading.enumerate()))

        asyncio.run(main())
        """
    )
    assert child.stdout.splitlines() == ["done", "done", "job loop alive True"], (
        child.stdout + child.stderr
    )
    assert "job loop went on" in child.stderr


def test_a_job_that_stops_the_job_loop_does_not_stop_the_pool():
    child = run_script(
        """
        import asyncio
        from django_pdfpool.admission import Pool

        async def stops_its_loop():
            asyncio.get_running_loop().stop()
            await asyncio.sleep(0.01)
            return "stopped it"

        async def good():
            return "still working"

        async def main():
            pool = Pool(slots=1, queue=0, wait=None)
            for key, fn in ("k", stops_its_loop), ("k2", good):
                try:
                    print(await asyncio.wait_for(pool.run(key, "a", fn), 2))
                except BaseException as exc:
                    print("got", type(exc).__name__)

        asyncio.run(main())
        """
    )
    assert child.stdout.splitlines() == ["stopped it", "still working"], child.stdout + child.stderr
    assert "job loop was stopped" in child.stderr


@pytest.mark.parametrize("call", ["pool.run('k', 'b', None)", "pool.drain()"])
def test_a_call_left_on_a_closed_loop_is_collected_without_the_pools_lock(call):
    # A hand-rolled loop closed with the call's task pending leaves it to the garbage
    # collector, which may close its coroutine at any allocation, one made under the pool's
    # lock included: a coroutine that then took that lock (not reentrant) hung the process.
    child = run_script(
        f"""
        import asyncio, gc, os, threading
        from django_pdfpool.admission import Pool

        pool = Pool(slots=1, queue=0, wait=None)
        gate = threading.Event()

        async def held():
            while not gate.is_set():
                await asyncio.sleep(0.001)
            return "done"

        def abandoned():
            loop = asyncio.new_event_loop()
            loop.create_task({call})
            loop.run_until_complete(asyncio.sleep(0))  # the call now awaits the pool
            loop.close()

        async def main():
            gc.disable()  # until the lock is held: the left call stays uncollected
            started = asyncio.create_task(pool.run("k", "a", held))
            while not pool.running():
                await asyncio.sleep(0.001)
            thread = threading.Thread(target=abandoned)
            thread.start()
            thread.join()
            gate.set()
            print(await started)
            while not pool.idle():
                await asyncio.sleep(0.001)

        asyncio.run(main())

        def collect_under_the_lock():
            with pool._lock:  # as a collection at an allocation under it would
                gc.collect()

        collector = threading.Thread(target=collect_under_the_lock, daemon=True)
        collector.start()
        collector.join(5)
        print("hung" if collector.is_alive() else "collected", flush=True)
        os._exit(0)
        """
    )
    assert child.stdout.splitlines() == ["done", "collected"], child.stdout + child.stderr


def test_close_from_a_python_signal_handler_never_waits_for_the_lock_it_interrupted():
    # A signal.signal handler runs between two bytecodes of the main thread, which may be
    # inside a pool call holding the (not reentrant) lock: close() waiting for it hung.
    child = run_script(
        """
        import os, signal, threading
        from django_pdfpool.admission import Pool

        pool, returned = Pool(), threading.Event()
        signal.signal(signal.SIGUSR1, lambda signum, frame: pool.close())

        def watchdog():
            if not returned.wait(5):
                print("hung", flush=True)
                os._exit(0)

        threading.Thread(target=watchdog, daemon=True).start()
        with pool._lock:  # as in pressure() or snapshot() when the signal comes
            signal.raise_signal(signal.SIGUSR1)
        returned.set()
        print("closed", pool.snapshot().closed)
        """
    )
    assert child.stdout.splitlines() == ["closed True"], child.stdout + child.stderr


def test_a_forked_child_forgets_the_parents_jobs_and_locks():
    # A Celery prefork child or a gunicorn --preload worker inherits the pool mid-flight: the
    # parent's jobs run on a loop the child lacks, and a parent's thread may hold the lock.
    child = run_script(
        """
        import asyncio, os, signal, threading, time
        from django_pdfpool.admission import Pool

        signal.alarm(20)  # a hang ends this process (and the child below, its own alarm)
        pool = Pool(slots=1, queue=1, wait=30)
        gate, locked, release = threading.Event(), threading.Event(), threading.Event()

        async def held():
            while not gate.is_set():
                await asyncio.sleep(0.001)
            return "parent's"

        async def quick():
            return "child's"

        def hold_the_lock():  # as the status recorder's sampling thread may, at fork time
            with pool._lock:
                locked.set()
                release.wait()

        parent_job = threading.Thread(target=lambda: asyncio.run(pool.run("k", "a", held)))
        parent_job.start()
        while pool.running() != 1:
            time.sleep(0.001)
        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        locked.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(15)

            async def child():
                for key, caller in ("other", "b"), ("k", "c"), ("again", "a"):
                    try:
                        got = await asyncio.wait_for(pool.run(key, caller, quick), 5)
                    except BaseException as exc:
                        got = type(exc).__name__
                    print(key, got, flush=True)
                print("running", pool.running(), "queued", pool.queued(), flush=True)
            asyncio.run(child())
            os._exit(0)
        release.set()
        os.waitpid(pid, 0)
        gate.set()
        parent_job.join()
        holder.join()
        print("parent", pool.running(), flush=True)
        """
    )
    lines = child.stdout.splitlines()
    assert lines == [
        "other child's",
        "k child's",
        "again child's",
        "running 0 queued 0",
        "parent 0",
    ], child.stdout + child.stderr


def test_pressure_counts_a_queue_place_free_while_held_jobs_run_past_the_slots():
    # A Redis pool falling back holds its running jobs here, past ``slots``: the queue's
    # places are still free, and a door reading none would refuse what the pool admits.
    pool = Pool(slots=1, queue=2, wait=None)
    ends = [pool.hold(f"held-{n}", f"held-{n}") for n in range(2)]

    async def scenario():
        queued = asyncio.create_task(pool.run("q1", "a", job("q1")))
        await until(lambda: pool.queued() == 1)
        assert pool.pressure("q2", "b").free == 1
        second = asyncio.create_task(pool.run("q2", "b", job("q2")))
        await until(lambda: pool.queued() == 2)
        assert pool.pressure("q3", "c").free == 0
        for end in ends:
            get_job_loop().call_soon_threadsafe(end, None, None)
        assert await asyncio.gather(queued, second) == ["q1", "q2"]

    run(scenario)
