"""Stateful test: two RedisPools against the reference model of the pool's rules, with
Redis faults among the steps.

The machine is tests/admission/test_pool_model.py's ``PoolModel`` (imported, not copied: the model,
its rules, ``admit``, ``settle``, the leaves, completions, failures, expiries, drain and
stop), driving two ``RedisPool`` instances in this process on one real redis-server, with
the same URL and namespace: two "processes" for Redis (each its own process id, channel and
lease), one job loop. Each call goes to one of them by its key and caller (``(key + caller)
% 2``), so the same caller makes calls from both processes (rule 2 across processes) and
sharers of a job are in both (rule 1, and outcomes that travel as JSON). The two are closed
together (drain or stop), as the model has one pool.

What differs from the local machine, each for a reason:

- Readings are cluster-wide (``running()``, ``queued()``, ``waiting()``, the snapshot's
  jobs, read through the first pool; both must agree on the counts); the counters are the
  sum of the two pools' own (each counts its own callers and jobs).
- A sharer in the other process of a job that fails gets ``RemoteJobError`` naming
  ``JobError`` and its message (docs/cluster.md), not a copy of the exception.
- ``wait`` is 0.3 s where the local machine's is 0.05 s (a queued job's expiry crosses a
  Redis round trip), and ``expire_shared`` lets the starter reach Redis before its sharers
  are sent (two admissions sent at once from two processes may reach Redis in either
  order, and a join-only call that arrives first has nothing to join).
- Every call with an ``fn`` also has an ``on_drop``; at the end each such call must have
  had exactly one of them (and never both at any step).
- The limits are also checked on the jobs themselves: never more than ``slots`` fns
  running at once (besides the model's key/caller overlap check).
- The model's patience with a step that shows no change (``STALL``) is 1.5 s, not 0.5 s: a
  Redis round trip under load, or a beat's catch-up (lease/3), may pass with nothing new.

The ``fault`` step (at most two per example) injects a Redis fault with jobs in flight:
Redis restarted empty, restarted with its data (``SAVE`` just before), or every client
connection dropped (``CLIENT KILL`` of the normal and pub/sub connections). What the model
allows then, from docs/cluster.md's failure table:

- every call waiting at the fault has an outcome allowed for its place: a caller of a
  running job in the job's own process gets the job's result ("jobs already running finish
  and answer their own callers"); a caller in the other process may instead get
  ``RunnerLost`` or ``CoordinatorUnavailable``; a caller of a queued job may get the result,
  ``RunnerLost``, ``CoordinatorUnavailable`` (its place was in Redis) or ``PoolBusy``;
- the step waits until both pools admit through Redis again (a join-only call answered
  with "nothing to join"), then gives Redis up to two leases and a second to count again
  each job still running, in the process that runs it (its owner's beat: within a lease);
- then, with those jobs still held: from the other process, a call for each of their keys
  (it must share the job, not run it again) and a fresh key from each process (it must
  wait for a slot while the slots are held): outcomes as above (a result, ``PoolBusy``,
  ``RunnerLost``); the limits must hold throughout, on the jobs themselves;
- then every job is released, every call must be answered, Redis must be idle, and the
  model starts again from what the pools show (no job in flight, counters re-read): the
  exact predictions resume with the next step.

Run time: about 30-60 s (``max_examples`` and ``stateful_step_count`` below; each fault
costs one or two seconds, most of them waiting for the probe and the beat). Shrinking is
off: every replay of a fault costs seconds, and one shrink took five minutes (near the
timeout, which would have lost the report); a failure is reported as found, and saved in
Hypothesis's example database, which the next run replays first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import time
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_pdfpool.admission import RedisPool
from django_pdfpool.admission.jobs import get_job_loop
from django_pdfpool.admission.ledger import Counters
from django_pdfpool.exceptions import RemoteJobError
from tests.admission import test_pool_model
from tests.admission.test_pool_model import CALLERS, KEYS, LONG_WAIT, SETTLE, Call, PoolModel
from tests.support.redis_server import LEASE, RedisServer, namespace_keys

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(600)

WAIT = 0.3  # the tiny `wait` of this machine (see the module's docstring)
TIMEOUT = 0.5  # REDIS_TIMEOUT
MAX_FAULTS = 2  # per example
BACK = 10.0  # seconds for both pools to admit through Redis again after a fault
REGISTER = 2 * LEASE + 1.0  # seconds for Redis to count again the jobs still running
ANSWER = LEASE + 6.0  # seconds a released call may take to be answered
IDLE = 2 * LEASE + 3.0  # seconds for Redis to show nothing in flight once all is answered

RESULT = "result"  # ("result", value): what the model's outcome() gives for a result
LOST = ("refused", "runner_lost", True)
UNAVAILABLE = ("refused", "unavailable", True)
BUSY = ("refused", "busy", True)
STALL = 2.0  # the model's patience for a step that shows no change (as the local pool's)
SEEN: collections.Counter[str] = collections.Counter()  # what the faults met, over a run


class TwoPoolModel(PoolModel):
    """``PoolModel`` driving two RedisPools that share a namespace."""

    def __init__(self, server: RedisServer) -> None:
        super().__init__()
        self.server = server
        self.namespace = f"m-{uuid4().hex[:10]}"
        self.pools: list[RedisPool] = []
        self.side: dict[int, int] = {}  # wid -> the pool (0 or 1) that got the call
        self.fates: dict[int, list[str]] = {}  # wid -> "fn" / "drop", as they happened
        self.with_fn: set[int] = set()  # the calls made with an fn (and an on_drop)
        self.running_fns = self.peak_fns = 0
        self.faults = 0
        self.extra = itertools.count()

    # --- driving two pools ---------------------------------------------------------

    @initialize(
        slots=st.sampled_from([1, 2]),
        queue=st.sampled_from([2, 1, 3, 0]),
        wait=st.sampled_from([None, LONG_WAIT, None, LONG_WAIT, WAIT]),
    )
    def build(self, slots: int, queue: int, wait: float | None) -> None:
        self.slots, self.queue_size, self.wait = slots, queue, wait
        self.expires = wait == WAIT
        self.pools = [
            RedisPool(slots, queue, wait, url=self.server.url, namespace=self.namespace,
                      lease=LEASE, timeout=TIMEOUT, on_error=self.observe_error)
            for _ in range(2)
        ]  # fmt: skip
        self.pool = self.pools[0]
        self.settle()

    def pick(self, key: str, caller: str) -> int:
        if key in KEYS and caller in CALLERS:
            return (KEYS.index(key) + CALLERS.index(caller)) % 2
        return hash((key, caller)) % 2

    def call(self, key: str, caller: str, fn, side: int | None = None) -> Call:
        call = Call(next(self.ids))
        self.calls[call.wid] = call
        side = self.pick(key, caller) if side is None else side
        self.side[call.wid] = side
        pool = self.pools[side]
        wid, fates = call.wid, self.fates
        on_drop, job = None, None
        if fn is not None:
            self.with_fn.add(wid)

            async def job():
                with self.lock:
                    fates.setdefault(wid, []).append("fn")
                return await fn()

            def on_drop():
                with self.lock:
                    fates.setdefault(wid, []).append("drop")

        async def run():
            async with asyncio.timeout(None) as scope:
                call.scope = scope
                return await pool.run(key, caller, job, on_drop=on_drop)

        call.task = self.loop.create_task(run())
        return call

    def job_fn(self, jid: int, key: str, caller: str):
        inner = super().job_fn(jid, key, caller)

        async def fn():
            with self.lock:
                self.running_fns += 1
                self.peak_fns = max(self.peak_fns, self.running_fns)
            try:
                return await inner()
            finally:
                with self.lock:
                    self.running_fns -= 1

        return fn

    def outcome(self, call: Call) -> tuple[Any, ...] | None:
        task = call.task
        if task.done() and not task.cancelled() and isinstance(task.exception(), RemoteJobError):
            error = task.exception()
            job = call.job
            across = job is not None and self.side[call.wid] != self.side[job.starter]
            if across and error.type_name.endswith(".JobError"):
                return ("error", error.message, True)  # the other process: by name and text
            return ("unexpected", repr(error))
        return super().outcome(call)

    def counters_now(self) -> dict[str, int]:
        totals = dict.fromkeys(Counters.__dataclass_fields__, 0)
        for pool in self.pools:
            for name, value in dataclasses.asdict(pool.local_snapshot().counters).items():
                totals[name] += value
        return totals

    def observed(self) -> dict[str, Any]:
        """The base model's reading of the first pool, with the second pool's running,
        queued and closed beside it, and every process's counters summed."""
        second = self.pools[1]
        seen = super().observed()
        seen["running"] = (seen["running"], second.running())
        seen["queued"] = (seen["queued"], second.queued())
        seen["closed"] = (seen["closed"], second.snapshot().closed)
        seen["counters"] = self.counters_now()
        return seen

    def expected(self) -> dict[str, Any]:
        expected = super().expected()
        running, queued = expected["running"], expected["queued"]
        expected["running"], expected["queued"] = (running, running), (queued, queued)
        expected["closed"] = (self.closed, self.closed)
        return expected

    # --- rules that change with two pools --------------------------------------------

    def before_sharers(self, call: Any) -> None:
        """The starter's job must be queued in Redis before its sharers are sent."""
        queued = len(self.queue) - 1
        self.run_until(lambda: call.task.done() or self.pool.queued() > queued)

    async def closing(self, how: str) -> None:
        """Both pools drain, or both stop (the model's one pool closing), begun in one turn
        of the job loop: neither starts a job whose slot the other's stop has just freed."""

        async def both() -> None:
            await asyncio.gather(*(getattr(pool, how)() for pool in self.pools))

        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(both(), get_job_loop()))

    # --- faults ---------------------------------------------------------------------

    def run_until(self, condition, timeout: float = SETTLE) -> bool:
        """Run the machine's loop until ``condition()``; whether it held in time."""

        async def wait() -> bool:
            deadline = time.monotonic() + timeout
            while not condition():
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.002)
            return True

        return self.loop.run_until_complete(wait())

    def admits_through_redis(self, side: int) -> bool:
        """A join-only call of a fresh key: "nothing to join" (ValueError) comes from
        Redis's answer; a refusal means the pool is still in its fallback."""
        n = next(self.extra)

        async def probe() -> bool:
            try:
                await self.pools[side].run(f"probe-{n}", f"probe-{n}", None)
            except ValueError:
                return self.pools[side].mode == "redis"
            except Exception:
                return False
            return False

        return self.loop.run_until_complete(probe())

    def counted(self, held: list[tuple[int, str]]) -> bool:
        """Redis counts each (side, key) running, in that side's process."""
        if self.pool.mode != "redis":
            return False
        snap = self.pool.cluster_snapshot()
        seen = {(hold.process, key) for hold in snap.processes for key in hold.running}
        return all((self.pools[side].process, key) in seen for side, key in held)

    def sharers_in_redis(self, key: str) -> int:
        if self.pool.mode != "redis":
            return -1
        return sum(job.sharers for job in self.pool.snapshot().jobs if job.key == key)

    def extra_call(self, key: str, caller: str, side: int) -> tuple[Call, int]:
        """A call outside the model (the fault step's): gated like the model's jobs;
        returned once Redis has it or it is answered."""
        jid = next(self.ids)
        before = max(0, self.sharers_in_redis(key))
        call = self.call(key, caller, self.job_fn(jid, key, caller), side=side)
        self.run_until(lambda: call.task.done() or self.sharers_in_redis(key) > before, BACK)
        return call, jid

    @precondition(lambda self: not self.closed and self.faults < MAX_FAULTS and bool(self.jobs))
    @rule(kind=st.sampled_from(["restart", "restart with data", "drop connections"]))
    def fault(self, kind: str) -> None:
        """A Redis fault with the jobs in flight held; see the module's docstring."""
        self.faults += 1
        SEEN[f"fault: {kind}"] += 1
        allowed: dict[int, set[tuple[Any, ...]]] = {}
        held: list[tuple[int, str]] = []  # (side, key) of the running jobs
        for job in self.jobs.values():
            side = self.side[job.starter]
            result = (RESULT, f"r{job.jid}")
            if job.state == "running":
                held.append((side, job.key))
            for wid in job.waiters:
                if job.state == "running" and self.side[wid] == side:
                    allowed[wid] = {result}
                elif job.state == "running":
                    allowed[wid] = {result, LOST, UNAVAILABLE}
                else:
                    allowed[wid] = {result, LOST, UNAVAILABLE, BUSY}
        jids = [job.jid for job in self.jobs.values()]

        if kind == "restart":
            self.server.restart()
        elif kind == "restart with data":
            self.server.save()
            self.server.restart(keep_data=True)
        else:
            self.server.drop_clients("normal", "pubsub")

        for side in (0, 1):
            deadline = time.monotonic() + BACK
            while not self.admits_through_redis(side):
                assert time.monotonic() < deadline, f"pool {side}: still refusing after a {kind}"
                self.loop.run_until_complete(asyncio.sleep(0.02))
        self.run_until(lambda: self.counted(held), REGISTER)

        # new calls while the jobs that ran through the fault are still held
        for side, key in held:
            call, jid = self.extra_call(key, f"x{next(self.extra)}", 1 - side)
            shared, anew = (RESULT, f"r{self.jobs[key].jid}"), (RESULT, f"r{jid}")
            allowed[call.wid] = {shared, anew, LOST, BUSY}  # anew: the limits check says
            jids.append(jid)
        for side in (0, 1):
            key = f"y{next(self.extra)}"
            call, jid = self.extra_call(key, f"x{next(self.extra)}", side)
            allowed[call.wid] = {(RESULT, f"r{jid}"), LOST, BUSY}
            jids.append(jid)
        self.check_limits()

        # release everything; every call answered as allowed; Redis idle
        for jid in jids:
            self.verdicts[jid] = "ok"
            self.gates[jid].set()
        done = self.run_until(lambda: all(self.calls[w].task.done() for w in allowed), ANSWER)
        waiting = [w for w in allowed if not self.calls[w].task.done()]
        assert done, f"calls not answered {ANSWER} s after their jobs were released: {waiting}"
        for w in allowed:
            got = self.outcome(self.calls[w])
            SEEN[f"after a fault, a call got: {got[0] if got[0] == RESULT else got[:2]}"] += 1
        wrong = {w: self.outcome(self.calls[w]) for w in allowed}
        wrong = {w: got for w, got in wrong.items() if got not in allowed[w]}
        assert not wrong, f"after a {kind}: {wrong} (allowed: { {w: allowed[w] for w in wrong} })"
        idle = self.run_until(self.quiet, IDLE)
        assert idle, f"Redis still shows jobs {IDLE} s after every call was answered"
        self.check_limits()

        # the model starts again from what the pools show
        self.jobs.clear()
        self.queue.clear()
        self.callers.clear()
        for call in self.calls.values():
            if call.expect is None:
                call.expect = self.outcome(call)
        seen = self.observed()
        self.counters = dict(seen["counters"])
        self.start_order = list(seen["started"])
        self.expect_cancelled = list(seen["cancelled"])
        assert all(original for _, _, original in seen["noticed"]), seen["noticed"]
        self.expect_noticed = [(key, message) for key, message, _ in seen["noticed"]]
        self.settle()

    def quiet(self) -> bool:
        pool = self.pool
        return (
            pool.mode == "redis"
            and all(p.idle() for p in self.pools)
            and (pool.running(), pool.queued()) == (0, 0)
            and pool.snapshot().jobs == ()
        )

    # --- invariants and the end -----------------------------------------------------

    def check_limits(self) -> None:
        with self.lock:
            peak, broken = self.peak_fns, list(self.broken)
            twice = [w for w, fates in self.fates.items() if len(fates) > 1]
        assert peak <= self.slots, f"{peak} jobs ran at once with {self.slots} slots"
        assert not broken, f"a key or a caller ran twice at once: {broken}"
        assert not twice, f"calls that got both fn() and on_drop(): {twice}"

    @invariant()
    def limits_hold(self) -> None:
        if self.pool is None:
            return
        self.check_limits()
        snap = self.pool.snapshot()
        assert snap.running <= self.slots
        assert snap.queued <= self.queue_size
        callers = [job.caller for job in snap.jobs]
        assert len(callers) == len(set(callers)), "a caller holds two jobs"
        keys = [job.key for job in snap.jobs]
        assert len(keys) == len(set(keys)), "a key has two jobs"

    def wind_down(self) -> None:
        """Let every job end, close both pools; then nothing may be left: no task, no
        key of the namespace, and exactly one of fn()/on_drop() for every call with fn."""
        for gate in self.gates.values():
            gate.set()
        pools, loop = self.pools, self.loop
        patience = 0.1 if self.failed else SETTLE

        async def close():
            await asyncio.wait_for(asyncio.gather(*(p.drain() for p in pools)), patience)
            await asyncio.wait_for(asyncio.gather(*(p.stop() for p in pools)), patience)
            tasks = [call.task for call in self.calls.values()] + self.closers
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), patience)

        if self.failed:
            with contextlib.suppress(Exception):  # a wedged pool: just clean up
                loop.run_until_complete(close())
            return
        loop.run_until_complete(close())
        assert asyncio.all_tasks(loop) == set()
        assert all(p.idle() for p in pools)
        with self.lock:
            tasks = set(self.job_tasks)
            fates = {wid: list(f) for wid, f in self.fates.items()}
        assert [task for task in tasks if not task.done()] == []
        wrong = {wid: fates.get(wid, []) for wid in self.with_fn if len(fates.get(wid, [])) != 1}
        assert not wrong, f"not exactly one of fn()/on_drop(): {wrong}"
        deadline = time.monotonic() + IDLE
        while namespace_keys(self.server.url, self.namespace):
            assert time.monotonic() < deadline, namespace_keys(self.server.url, self.namespace)
            time.sleep(0.01)


def test_two_redis_pools_match_the_model(own_redis, monkeypatch):
    # a Redis round trip, or a beat's catch-up (lease/3), may pass with nothing to see yet
    monkeypatch.setattr(test_pool_model, "STALL", STALL)
    SEEN.clear()
    run_state_machine_as_test(
        lambda: TwoPoolModel(own_redis),
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            report_multiple_bugs=False,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: see above
        ),
    )
    print(dict(SEEN))
    faults = sum(n for what, n in SEEN.items() if what.startswith("fault: "))
    assert faults >= 10, f"too few faults to mean anything: {dict(SEEN)}"
