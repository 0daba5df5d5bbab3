"""Stateful test: the real Pool against a small reference model of its rules.

Hypothesis drives one Pool per example through starts, joins (with and without
fn), leaves (cancel or timeout), completions, failures, expiries of ``wait``,
drain and stop. After every step the test waits (bounded) until the pool's
observable state settles, then asserts it equals the model's prediction: which
keys run or wait, the order in which jobs start, what each caller got, the
observer's calls and the snapshot's counters.

Jobs run on the pool's background loop thread, so each is held by a
``threading.Event`` gate that the job polls. Most machines use ``wait=None`` or a
``wait`` too long to pass (it still arms a timer per queued job, which must not
outlive the job); a few use a tiny ``wait``, and there a job that has to queue is
watched until it expires (so no queued job outlives the step that queued it).
At the end, nothing may be left: no task on either loop, no armed timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_pdfpool.admission import Pool
from django_pdfpool.admission.jobs import get_job_loop
from django_pdfpool.admission.ledger import Counters
from django_pdfpool.exceptions import Refused

KEYS = ("k0", "k1", "k2", "k3")
CALLERS = ("c0", "c1", "c2", "c3")
WAIT = 0.05  # a tiny `wait`, in seconds: a queued job expires within the step
LONG_WAIT = 600.0  # a `wait` that never passes in a test, but arms a timer per queued job
GATE_POLL = 0.001  # how often a held job looks at its gate
SETTLE = 5.0  # seconds a step may take to settle before the test fails
STALL = 2.0  # ... or seconds without any change (a loaded machine may not run the pool's thread
# for a while; the figure only ends a failing step sooner)


class JobError(Exception):
    """What a failing job raises."""


@dataclass
class Job:
    """The model of one job in flight."""

    jid: int
    key: str
    caller: str
    starter: int
    state: str  # "running" or "queued"
    waiters: list[int] = field(default_factory=list)


@dataclass
class Call:
    """One ``pool.run`` on the machine's loop; ``expect`` is None while it should wait."""

    wid: int
    task: asyncio.Task[Any] | None = None
    scope: asyncio.Timeout | None = None
    job: Job | None = None
    expect: tuple[Any, ...] | None = None


class PoolModel(RuleBasedStateMachine):
    """One real Pool, its model, and the calls made to both on one event loop."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.pool: Pool | None = None
        self.ids = itertools.count()
        self.lock = threading.Lock()  # guards what the jobs write from the job loop
        self.gates: dict[int, threading.Event] = {}
        self.verdicts: dict[int, str] = {}  # jid -> "ok" | "fail"
        self.started: list[int] = []  # jids, in the order their fn began
        self.job_tasks: set[asyncio.Task[Any]] = set()  # the pool's tasks for them
        self.cancelled: list[int] = []  # jids whose fn saw CancelledError
        self.raised: dict[str, JobError] = {}  # message -> the original error
        self.noticed: list[tuple[str, BaseException]] = []  # the observer's calls
        self.active: set[str] = set()  # keys and callers of fns running right now
        self.broken: list[tuple[str, str]] = []  # overlaps seen by the fns
        # the model
        self.slots = self.queue_size = 0
        self.wait: float | None = None
        self.expires = False  # whether a queued job's `wait` passes within a step
        self.expiries = 0  # each costs WAIT seconds of real time
        self.jobs: dict[str, Job] = {}
        self.queue: list[str] = []
        self.callers: dict[str, Job] = {}
        self.closed = False
        self.counters = dict.fromkeys(Counters.__dataclass_fields__, 0)
        self.start_order: list[int] = []
        self.expect_cancelled: list[int] = []
        self.expect_noticed: list[tuple[str, str]] = []
        self.calls: dict[int, Call] = {}
        self.closers: list[asyncio.Task[None]] = []
        self.late_calls = 0
        self.failed = False  # a step did not settle: the pool may be wedged

    # --- the jobs (they run on the pool's loop thread) ---------------------

    def job_fn(self, jid: int, key: str, caller: str):
        gate = self.gates[jid] = threading.Event()

        async def fn():
            with self.lock:
                self.started.append(jid)
                self.job_tasks.add(asyncio.current_task())
                if key in self.active or caller in self.active:
                    self.broken.append((key, caller))
                self.active |= {key, caller}
            try:
                while not gate.is_set():
                    await asyncio.sleep(GATE_POLL)
                if self.verdicts.get(jid) == "fail":
                    error = JobError(f"job {jid} failed")
                    with self.lock:
                        self.raised[str(error)] = error
                    raise error
                return f"r{jid}"
            except asyncio.CancelledError:
                with self.lock:
                    self.cancelled.append(jid)
                raise
            finally:
                with self.lock:
                    self.active -= {key, caller}

        return fn

    def observe_error(self, key: str, error: BaseException) -> None:
        with self.lock:
            self.noticed.append((key, error))

    # --- driving the real pool ---------------------------------------------

    def call(self, key: str, caller: str, fn) -> Call:
        call = Call(next(self.ids))
        self.calls[call.wid] = call

        async def run():
            async with asyncio.timeout(None) as scope:
                call.scope = scope
                return await self.pool.run(key, caller, fn)

        call.task = self.loop.create_task(run())
        return call

    def outcome(self, call: Call) -> tuple[Any, ...] | None:
        task = call.task
        if not task.done():
            return None
        if task.cancelled():
            return ("cancelled",)
        error = task.exception()
        if error is None:
            return ("result", task.result())
        if isinstance(error, Refused):
            return ("refused", error.code, error.retry_after >= 0)
        if isinstance(error, TimeoutError):
            return ("timeout",)
        if isinstance(error, TypeError | ValueError):
            return ("bad call",)
        if isinstance(error, JobError):
            original = self.raised.get(str(error))
            own = original is not None and error is not original
            return ("error", str(error), own and error.__cause__ is original)
        return ("unexpected", repr(error))

    def observed(self) -> dict[str, Any]:
        pool = self.pool
        snap = pool.snapshot()
        with self.lock:
            started, cancelled = list(self.started), sorted(self.cancelled)
            noticed = [(k, str(e), self.raised.get(str(e)) is e) for k, e in self.noticed]
        return {
            "running": pool.running(),
            "queued": pool.queued(),
            "waiting": {key: pool.waiting(key) for key in KEYS},
            "closed": snap.closed,
            "counts": (snap.running, snap.queued),
            "jobs": sorted((j.key, j.caller, j.state, j.sharers) for j in snap.jobs),
            "counters": dataclasses.asdict(snap.counters),
            "started": started,
            "cancelled": cancelled,
            "noticed": noticed,
            "calls": {wid: self.outcome(call) for wid, call in self.calls.items()},
            "closers": [task.done() for task in self.closers],
        }

    def expected(self) -> dict[str, Any]:
        running = self.running_count()
        return {
            "running": running,
            "queued": len(self.queue),
            "waiting": {key: self.sharers_besides_starter(key) for key in KEYS},
            "closed": self.closed,
            "counts": (running, len(self.queue)),
            "jobs": sorted((j.key, j.caller, j.state, len(j.waiters)) for j in self.jobs.values()),
            "counters": dict(self.counters),
            "started": list(self.start_order),
            "cancelled": sorted(self.expect_cancelled),
            "noticed": [(key, message, True) for key, message in self.expect_noticed],
            "calls": {wid: call.expect for wid, call in self.calls.items()},
            "closers": [not self.jobs for _ in self.closers],
        }

    def settle(self) -> None:
        """Wait until the pool shows what the model predicts, then compare. Give up
        after SETTLE seconds, or sooner once nothing has changed for STALL seconds."""
        expected = self.expected()

        async def until_settled():
            deadline = time.monotonic() + SETTLE
            seen, since = None, time.monotonic()
            for spin in itertools.count():
                now, last = time.monotonic(), seen
                seen = self.observed()
                if seen != last:
                    since = now
                if seen == expected or now > deadline or now - since > STALL:
                    return seen
                await asyncio.sleep(0 if spin < 4 else 0.0005)

        seen = self.loop.run_until_complete(until_settled())
        self.failed = seen != expected
        differences = {
            k: {"pool": seen[k], "model": v} for k, v in expected.items() if seen[k] != v
        }
        assert not differences, differences
        ended = [c.task for c in self.calls.values() if c.task.done()]
        errors = [t.exception() for t in ended if not t.cancelled()]
        errors = [error for error in errors if error is not None]
        assert len({id(e) for e in errors}) == len(errors), "sharers share an exception"

    # --- the model ---------------------------------------------------------

    def running_count(self) -> int:
        return sum(job.state == "running" for job in self.jobs.values())

    def sharers_besides_starter(self, key: str) -> int:
        job = self.jobs.get(key)
        return 0 if job is None else len(job.waiters) - (job.starter in job.waiters)

    def start(self, job: Job) -> None:
        job.state = "running"
        self.counters["started"] += 1
        self.start_order.append(job.jid)

    def forget(self, job: Job) -> None:
        del self.jobs[job.key]
        del self.callers[job.caller]
        if job.key in self.queue:
            self.queue.remove(job.key)

    def end(self, job: Job, expect: tuple[Any, ...], counter: str) -> None:
        for wid in job.waiters:
            self.calls[wid].expect = expect
        self.forget(job)
        self.counters[counter] += 1
        while self.queue and self.running_count() < self.slots:
            self.start(self.jobs[self.queue.pop(0)])

    def admit(self, key: str, caller: str, with_fn: bool) -> tuple[Call, str]:
        """Start ``pool.run`` and predict it by the rules; return the call and its fate."""
        jid = next(self.ids)
        call = self.call(key, caller, self.job_fn(jid, key, caller) if with_fn else None)
        job = self.jobs.get(key)
        if self.closed:
            self.counters["refused_closed"] += 1
            call.expect = ("refused", "closed", True)
            return call, "refused"
        if job is not None:
            self.counters["joined"] += 1
            job.waiters.append(call.wid)
            call.job = job
            return call, "joined"
        if not with_fn:
            call.expect = ("bad call",)
            return call, "refused"
        if caller in self.callers:
            self.counters["refused_caller"] += 1
            call.expect = ("refused", "caller_busy", True)
            return call, "refused"
        full = self.running_count() >= self.slots
        if full and len(self.queue) >= self.queue_size:
            self.counters["refused_busy"] += 1
            call.expect = ("refused", "busy", True)
            return call, "refused"
        job = Job(jid, key, caller, call.wid, "queued", [call.wid])
        self.jobs[key] = self.callers[caller] = job
        call.job = job
        if full:
            self.queue.append(key)
            return call, "queued"
        self.start(job)
        return call, "started"

    def expire(self, job: Job) -> None:
        """The model of ``wait`` passing for a queued job."""
        self.expiries += 1
        for wid in job.waiters:
            self.calls[wid].expect = ("refused", "busy", True)
        self.counters["refused_busy"] += len(job.waiters)
        self.forget(job)

    # --- rules -------------------------------------------------------------

    @initialize(
        slots=st.sampled_from([1, 2]),
        queue=st.sampled_from([2, 1, 3, 0]),  # mostly room for a line to form
        wait=st.sampled_from([None, LONG_WAIT, None, LONG_WAIT, WAIT]),
    )
    def build(self, slots: int, queue: int, wait: float | None) -> None:
        self.slots, self.queue_size, self.wait = slots, queue, wait
        self.expires = wait == WAIT
        self.pool = Pool(slots, queue, self.wait, on_error=self.observe_error)
        self.settle()

    @precondition(
        lambda self: (
            self.late_calls < 2  # once closed, a couple of calls are enough
            and (not self.expires or self.expiries < 3 or self.running_count() < self.slots)
        )
    )
    @rule(
        key=st.sampled_from(KEYS),
        caller=st.sampled_from(CALLERS),
        with_fn=st.integers(0, 3).map(lambda i: i != 3),
    )
    def run_job(self, key: str, caller: str, with_fn: bool) -> None:
        began = time.monotonic()
        self.late_calls += self.closed
        call, fate = self.admit(key, caller, with_fn)
        if fate == "queued" and self.expires:
            self.expire(call.job)  # with a tiny `wait`, watch it expire
            self.settle()
            assert time.monotonic() - began >= self.wait * 0.9, "refused before `wait`"
        else:
            self.settle()

    @precondition(lambda self: bool(self.jobs) and self.late_calls < 2)
    @rule(data=st.data(), caller=st.sampled_from(CALLERS), with_fn=st.booleans())
    def join(self, data: st.DataObject, caller: str, with_fn: bool) -> None:
        """Any caller, even a busy one, shares a running or queued job (not once closed)."""
        key = data.draw(st.sampled_from(sorted(self.jobs)))
        self.late_calls += self.closed
        _, fate = self.admit(key, caller, with_fn)
        assert fate == ("refused" if self.closed else "joined")
        self.settle()

    def fresh(self) -> tuple[list[str], list[str]]:
        """Keys with no job in flight and callers holding none."""
        keys = [key for key in KEYS if key not in self.jobs]
        return keys, [caller for caller in CALLERS if caller not in self.callers]

    @precondition(
        lambda self: (
            not self.closed
            and all(self.fresh())
            and (not self.expires or self.running_count() < self.slots)
        )
    )
    @rule(data=st.data())
    def run_fresh(self, data: st.DataObject) -> None:
        """A new key for a free caller: starts or queues (fills the queue quickly)."""
        keys, callers = self.fresh()
        key, caller = data.draw(st.sampled_from(keys)), data.draw(st.sampled_from(callers))
        self.admit(key, caller, with_fn=True)
        self.settle()

    @precondition(
        lambda self: (
            self.expires
            and self.expiries < 2
            and not self.closed
            and self.queue_size > 0
            and self.running_count() == self.slots
        )
    )
    @rule(data=st.data(), sharers=st.lists(st.sampled_from(CALLERS), max_size=3))
    def expire_shared(self, data: st.DataObject, sharers: list[str]) -> None:
        """A queued job with sharers: ``wait`` passes and every sharer gets PoolBusy."""
        keys, callers = self.fresh()
        key, caller = data.draw(st.sampled_from(keys)), data.draw(st.sampled_from(callers))
        call, fate = self.admit(key, caller, with_fn=True)
        assert fate == "queued"
        self.before_sharers(call)
        for sharer in sharers:  # admitted in the same loop turn, long before `wait`
            self.admit(key, sharer, with_fn=False)
        self.expire(call.job)
        self.settle()

    def before_sharers(self, call: Any) -> None:
        """What ``expire_shared`` waits for between the queued call and its sharers."""

    def pending(self, state: str | None = None) -> list[int]:
        """Calls that should still be waiting (for a job in ``state``, if given)."""
        return sorted(
            wid
            for wid, call in self.calls.items()
            if call.expect is None and state in (None, call.job.state)
        )

    @precondition(lambda self: bool(self.pending()))
    @rule(data=st.data(), how=st.sampled_from(["cancel", "timeout"]))
    def leave(self, data: st.DataObject, how: str) -> None:
        self.leave_now(self.calls[data.draw(st.sampled_from(self.pending()))], how)

    @precondition(lambda self: bool(self.pending("queued")))
    @rule(data=st.data(), how=st.sampled_from(["cancel", "timeout"]))
    def leave_queue(self, data: st.DataObject, how: str) -> None:
        """A waiter of a queued job leaves: the job keeps its place while shared."""
        self.leave_now(self.calls[data.draw(st.sampled_from(self.pending("queued")))], how)

    def leave_now(self, call: Call, how: str) -> None:
        if how == "cancel":
            call.task.cancel()
            call.expect = ("cancelled",)
        else:

            async def time_out():
                call.scope.reschedule(self.loop.time())

            self.loop.run_until_complete(time_out())
            call.expect = ("timeout",)
        job = call.job
        job.waiters.remove(call.wid)
        if job.state == "queued" and not job.waiters:
            self.forget(job)
            self.counters["abandoned"] += 1
        self.settle()

    def running_keys(self) -> list[str]:
        return sorted(k for k, job in self.jobs.items() if job.state == "running")

    def finish(self, key: str, verdict: str) -> None:
        job = self.jobs[key]
        self.verdicts[job.jid] = verdict
        self.gates[job.jid].set()
        if verdict == "ok":
            self.end(job, ("result", f"r{job.jid}"), "completed")
        else:
            message = f"job {job.jid} failed"
            self.end(job, ("error", message, True), "failed")
            self.expect_noticed.append((key, message))
        self.settle()

    @precondition(lambda self: bool(self.running_keys()))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        self.finish(data.draw(st.sampled_from(self.running_keys())), "ok")

    @precondition(lambda self: bool(self.running_keys()))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        self.finish(data.draw(st.sampled_from(self.running_keys())), "fail")

    @precondition(lambda self: len(self.calls) >= 12 and len(self.closers) < 2)
    @rule(how=st.sampled_from(["drain", "stop"]))
    def close(self, how: str) -> None:
        """Drain (running and queued jobs finish) or stop (all refused, running cancelled)."""
        self.closed = True
        if how == "stop":
            for job in list(self.jobs.values()):
                for wid in job.waiters:
                    self.calls[wid].expect = ("refused", "closed", True)
                self.counters["refused_closed"] += len(job.waiters)
                if job.state == "running":
                    self.counters["cancelled"] += 1
                    self.expect_cancelled.append(job.jid)
                self.forget(job)
        self.closers.append(self.loop.create_task(self.closing(how)))
        self.settle()

    async def closing(self, how: str) -> None:
        """What ``close`` does to the pool under test."""
        await (self.pool.drain() if how == "drain" else self.pool.stop())

    @precondition(lambda self: self.closed)
    @rule()
    def pause(self) -> None:
        """Once closed, nothing more happens by itself."""
        self.loop.run_until_complete(asyncio.sleep(GATE_POLL))
        self.settle()

    # --- invariants and teardown -------------------------------------------

    @invariant()
    def limits_hold(self) -> None:
        if self.pool is None:
            return
        snap = self.pool.snapshot()
        assert snap.running <= self.slots
        assert snap.queued <= self.queue_size
        callers = [job.caller for job in snap.jobs]
        assert len(callers) == len(set(callers)), "a caller holds two jobs"
        keys = [job.key for job in snap.jobs]
        assert len(keys) == len(set(keys)), "a key has two jobs"
        assert not self.broken, "a key or a caller ran twice at once"

    def teardown(self) -> None:
        try:
            if self.pool is not None:
                self.wind_down()
        finally:
            leftovers = asyncio.all_tasks(self.loop)
            for task in leftovers:
                task.cancel()
            if leftovers:  # gather() of nothing would ask for the thread's own loop
                self.loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            self.loop.close()

    def wind_down(self) -> None:
        """Let every job end, then check that nothing is left behind."""
        for gate in self.gates.values():
            gate.set()
        pool, loop = self.pool, self.loop
        patience = 0.1 if self.failed else SETTLE  # a wedged pool: just clean up

        async def close():
            await asyncio.wait_for(pool.drain(), patience)
            await asyncio.wait_for(pool.stop(), patience)
            tasks = [call.task for call in self.calls.values()] + self.closers
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), patience)

        if self.failed:
            with contextlib.suppress(Exception):
                loop.run_until_complete(close())
            return
        loop.run_until_complete(close())
        assert asyncio.all_tasks(loop) == set()
        assert (pool.running(), pool.queued()) == (0, 0)
        assert pool.snapshot().jobs == ()
        assert all(pool.waiting(key) == 0 for key in KEYS)
        with self.lock:
            tasks = set(self.job_tasks)
        assert job_loop_leftovers(pool, tasks) == ([], [])


def job_loop_leftovers(pool: Pool, tasks: set[asyncio.Task[Any]]) -> tuple[list[Any], ...]:
    """Which of ``tasks`` (the jobs' own) are still alive, and which timers of ``pool``
    are still armed, as seen from the job loop's own thread."""

    async def look():
        loop = asyncio.get_running_loop()
        # loop._scheduled is CPython's private heap of TimerHandles
        timers = [
            h
            for h in loop._scheduled
            if not h.cancelled() and getattr(h._callback, "__self__", None) is pool
        ]
        return [task for task in tasks if not task.done()], timers

    deadline = time.monotonic() + STALL
    while True:
        found = asyncio.run_coroutine_threadsafe(look(), get_job_loop()).result(SETTLE)
        if found == ([], []) or time.monotonic() > deadline:
            return found
        time.sleep(0.001)


def test_pool_matches_its_model():
    run_state_machine_as_test(
        PoolModel,
        settings=settings(
            max_examples=200,
            stateful_step_count=30,
            deadline=None,
            report_multiple_bugs=False,  # a wedged pool makes every replay slow
        ),
    )
