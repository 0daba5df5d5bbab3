"""Fault injection on a real redis-server: the Redis pool across OS processes, each fault
injected while jobs are held running and queued, and the invariants checked after it.

Three worker processes (tests/support/redis_worker.py, spawned afresh for each test, each with its
own ``RedisPool``) share one namespace on a redis-server of the test's own. Before each
fault, ``hold()`` sets up the same picture: two jobs running (one in A, one in B), two
queued (C's, then A's), and sharers of each in other processes and in the job's own. Then
the fault, and the same continuation for every fault:

- the test waits until every live worker admits through Redis again (a join-only call that
  reaches Redis answers ``ValueError``: nothing to join);
- it gives the pool up to two leases and a second (REGISTER) to count again the jobs still
  running, each in the process that runs it (docs/cluster.md: limits shared again about
  1 s after Redis is back; its owner's beat counts a job again within a lease); polled
  on the cluster snapshot's per-process reading, and it goes on either way: the evidence
  decides (no call is made meanwhile);
- an "after" burst: from each live worker, a call for a key still running elsewhere and one
  for a fresh key, each waited for until Redis has it (or it is answered);
- every held job is released, every call must be answered, the namespace must empty by
  itself once idle, and then the pools are drained.

The faults: kill -9 of a worker holding slots; SIGSTOP of Redis for longer than the pools'
REDIS_TIMEOUT (shorter, and longer, than the lease); Redis restarted empty (fallback
"refuse" and "local"); Redis restarted with its data (saved just before, or before the
last changes); client connections dropped with scripts waiting in Redis (deterministic),
and dropped again and again under a stream of calls (random).

The invariants are checked on evidence the jobs leave outside Redis (files, one clock for
every process of the host: ``tests.support.redis_worker.Evidence``), over the whole timeline, not on
the pool's own counts: no key running twice at once, never more than SLOTS running
(cluster-wide; per process inside a local fallback's window, whose limits are per process
by design), every caller answered within a bound and with an answer the docs allow for its
role, a started job's own caller answered with its result, exactly one of ``fn()`` and
``on_drop()`` per call, and nothing of the namespace left in Redis once idle (SCAN). Redis's
own running/queued counts are sampled throughout as well (at most SLOTS / QUEUE).

Allowances, from docs/cluster.md's failure table (each stated where it applies): a sharer in
another process may get ``RunnerLost`` or ``CoordinatorUnavailable`` instead of the result;
a queued job may be refused with ``CoordinatorUnavailable`` (its place was in Redis) or
``RunnerLost``; calls made while Redis fails are refused with ``CoordinatorUnavailable``
(fallback "refuse") or run in the worker's own pool (fallback "local"); a full queue gives
``PoolBusy``; after connections were dropped again and again, a connection dropped while
idle may still fail the next call made on it (``CoordinatorUnavailable``: the process stays
coordinated, a fresh connection answering); a worker paused longer than the lease is reaped
as a dead one, and until its running jobs end the cluster may run that many beyond SLOTS.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis

from django_pdfpool.admission import RedisPool
from tests.support.redis_server import LEASE, RedisServer, namespace_keys
from tests.support.redis_worker import Evidence, Worker

pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = pytest.mark.timeout(120)

SLOTS, QUEUE, WAIT = 2, 4, 30.0  # WAIT: no queued job expires in these tests
TIMEOUT = 0.25  # REDIS_TIMEOUT of every pool: a reply slower than this is a failure
ANSWER = LEASE + 6.0  # seconds any call may take to be answered once it can be
BACK = 10.0  # seconds a worker may take to admit through Redis again after a fault
IDLE = 2 * LEASE + 2.0  # seconds for the namespace to empty by itself once idle
REGISTER = 2 * LEASE + 1.0  # seconds for Redis to count again the jobs still running
COUNT_LAG = 0.5  # seconds Redis's counts may trail a job's end (its finish script)

OK = "ok"
UNAVAILABLE, LOST, BUSY = "CoordinatorUnavailable", "RunnerLost", "PoolBusy"
CANCELLED = "CancelledError"

# what each role of call may be answered with (OK: its key, the job's result)
ALLOWED = {
    "runner": {OK},  # a running job's own caller: "finish and answer their own callers"
    "local sharer": {OK},  # shares a job of its own process: gets the object itself
    "sharer": {OK, LOST, UNAVAILABLE},  # shares another process's job
    "queued": {OK, LOST, UNAVAILABLE},  # its place was in Redis
    "outage refuse": {UNAVAILABLE},  # made while Redis fails, fallback "refuse"
    "outage local": {OK, BUSY},  # made while Redis fails, fallback "local"
    "dropped": {UNAVAILABLE, LOST, OK},  # its admission's connection was dropped
    "storm": {OK, BUSY, LOST, UNAVAILABLE},  # made while connections are being dropped
    "after": {OK, BUSY, LOST},  # made once every worker admits through Redis again
    # ... after connections were dropped again and again: one dropped while idle fails its
    # next call (docs/cluster.md: a connection dropped mid-script)
    "after drops": {OK, BUSY, LOST, UNAVAILABLE},
}


@dataclass
class Call:
    worker: Worker
    cid: str
    key: str
    caller: str
    role: str
    cancelled: bool = False
    answer: dict[str, Any] | None = field(default=None, repr=False)


def until(condition: Callable[[], Any], timeout: float, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached within {timeout} s"
        time.sleep(0.005)


def within(condition: Callable[[], Any], timeout: float) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Faulty:
    """Three workers sharing one namespace on ``server``, their calls, and the evidence."""

    def __init__(
        self,
        server: RedisServer,
        directory: Path,
        fallback: str = "refuse",
        timeout: float = TIMEOUT,
    ) -> None:
        self.server, self.fallback = server, fallback
        self.namespace = f"f-{uuid4().hex[:10]}"
        directory.mkdir(parents=True, exist_ok=True)
        self.log = str(directory)
        self.evidence = Evidence(directory)
        self.workers = [Worker() for _ in range(3)]
        for worker in self.workers:
            worker.ready()
            worker.ask(
                "pool",
                name="p",
                namespace=self.namespace,
                url=server.url,
                slots=SLOTS,
                queue=QUEUE,
                wait=WAIT,
                lease=LEASE,
                fallback=fallback,
                timeout=timeout,
            )
        self.observer = RedisPool(
            SLOTS,
            QUEUE,
            WAIT,
            url=server.url,
            namespace=self.namespace,
            lease=LEASE,
            timeout=TIMEOUT,
        )  # reads only
        self.calls: list[Call] = []
        self.problems: list[str] = []
        self.breaches: list[str] = []
        self.windows: list[tuple[float, float]] = []  # local fallback: per-process limits
        # a paused worker's running job, counted again: beyond SLOTS from the pause until
        # that job ends (docs/cluster.md's bound); (pause, key)
        self.overlaps: list[tuple[float, str]] = []
        self.dead: set[Worker] = set()
        self.counter = itertools.count()
        self.samples: list[tuple[float, int, int]] = []  # when, Redis's running/queued
        self.probed: tuple[dict[str, Any], str] | None = None  # the last join-only call
        self.seen_after: tuple[list[str], str, int, int] | None = None  # for the report
        self.after_role = "after"
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    # --- calls ------------------------------------------------------------------

    def call(self, worker: Worker, key: str, caller: str, role: str, **job: Any) -> Call:
        job["log"] = self.log
        cid = f"c{next(self.counter)}"  # unique across workers: the evidence's call id
        worker.send("run", id=cid, pool="p", key=key, caller=caller, job=job)
        call = Call(worker, cid, key, caller, role)
        self.calls.append(call)
        return call

    def cancel(self, call: Call) -> None:
        call.cancelled = True
        call.worker.send("cancel", of=call.cid)

    def answered(self, call: Call) -> bool:
        return call.worker.done(call.cid)

    def answer(self, call: Call, timeout: float = ANSWER) -> dict[str, Any]:
        call.answer = call.worker.answer(call.cid, timeout)
        return call.answer

    def live(self) -> list[Worker]:
        return [worker for worker in self.workers if worker not in self.dead]

    def sharers(self, key: str) -> int:
        """Callers (the starter included) waiting on ``key``'s job, per Redis."""
        if self.observer.mode != "redis":
            return -1
        return sum(job.sharers for job in self.observer.snapshot().jobs if job.key == key)

    def registered(self, call: Call, before: int) -> None:
        """Wait until Redis has ``call`` (more callers on its key than ``before``) or it
        is answered; go on after a while either way (what follows judges)."""
        within(lambda: self.answered(call) or self.sharers(call.key) > before, BACK)

    def send_registered(self, worker: Worker, key: str, caller: str, role: str, **job: Any) -> Call:
        before = max(0, self.sharers(key))
        call = self.call(worker, key, caller, role, **job)
        self.registered(call, before)
        return call

    # --- the picture before each fault -----------------------------------------------

    def hold(self, full: bool = True) -> dict[str, Call]:
        """Two jobs running (h1 in A, h2 in B), two queued (q1 of C, then q2 of A),
        sharers in other processes (of h1 in B, of h2 in C, of q1 in A) and in the
        job's own (of h1 in A). Not ``full``: h1 and its sharers only."""
        a, b, c = self.workers
        ev, obs = self.evidence, self.observer
        held = {"h1": self.call(a, "h1", "a1", "runner", gate="g1")}
        until(lambda: ev.running("h1"), ANSWER, "h1 started")
        if not full:
            held["s1"] = self.send_registered(b, "h1", "b2", "sharer")
            held["s4"] = self.send_registered(a, "h1", "a4", "local sharer")
            assert (obs.running(), obs.queued(), self.sharers("h1")) == (1, 0, 3)
            return held
        held["h2"] = self.call(b, "h2", "b1", "runner", gate="g2")
        until(lambda: ev.running("h2"), ANSWER, "h2 started")
        held["q1"] = self.call(c, "q1", "c1", "queued", gate="g1")
        until(lambda: obs.queued() == 1, ANSWER, "q1 queued")
        held["q2"] = self.call(a, "q2", "a2", "queued", gate="g1")
        until(lambda: obs.queued() == 2, ANSWER, "q2 queued")
        held["s1"] = self.send_registered(b, "h1", "b2", "sharer")
        held["s2"] = self.send_registered(c, "h2", "c2", "sharer")
        held["s3"] = self.send_registered(a, "q1", "a3", "sharer")
        held["s4"] = self.send_registered(a, "h1", "a4", "local sharer")
        assert (obs.running(), obs.queued()) == (2, 2)
        assert [self.sharers(key) for key in ("h1", "h2", "q1", "q2")] == [3, 2, 2, 1]
        assert not any(self.answered(call) for call in self.calls)
        return held

    # --- after the fault ------------------------------------------------------------

    def admitting(self, worker: Worker) -> bool:
        """One join-only call: has it reached Redis (nothing to join: ValueError)?"""
        n = next(self.counter)
        key = f"probe-{n}"
        cid = worker.send("run", id=key, pool="p", key=key, caller=key, job=None)
        self.probed = worker.answer(cid, ANSWER), worker.ask("mode", pool="p")
        return self.probed[0].get("error") == "ValueError" and self.probed[1] == "redis"

    def recover(self) -> float:
        """Wait until every live worker admits through Redis again; then give the pool
        up to REGISTER seconds to count again the jobs still running (polled; it goes on
        either way, and the evidence decides)."""
        for worker in self.live():
            if not within(lambda worker=worker: self.admitting(worker), BACK):
                raise AssertionError(
                    f"worker {worker.pid} does not admit through Redis {BACK} s after the "
                    f"fault: its last join-only call got {self.probed[0]}, mode {self.probed[1]}"
                )
        back = time.monotonic()
        within(self.counted, REGISTER)
        return back

    def counted(self) -> bool:
        """Whether Redis counts every job still running as running, in the process
        that runs it (the status page's per-process reading)."""
        if self.observer.mode != "redis":
            return False
        processes = self.observer.cluster_snapshot().processes
        held = {(hold.pid, key) for hold in processes for key in hold.running}
        return all((span.pid, span.key) in held for span in self.evidence.running())

    def after(self) -> list[Call]:
        """From each live worker: a call for a key still running in another process (it
        must be shared, not run again), and one for a fresh key (it must wait for a slot
        if the slots are still held)."""
        made = []
        running = sorted({span.key for span in self.evidence.running()})
        self.seen_after = (
            running,
            self.observer.mode,
            self.observer.running(),
            self.observer.queued(),
        )
        for i, worker in enumerate(self.live()):
            others = [s.key for s in self.evidence.running() if s.pid != worker.pid] or running
            if others:
                made.append(
                    self.send_registered(
                        worker, others[0], f"after-{i}-h", self.after_role, gate="g1"
                    )
                )
            made.append(
                self.send_registered(worker, f"n{i}", f"after-{i}-n", self.after_role, gate="g1")
            )
        return made

    def finish(self) -> None:
        """Release every held job, wait for every answer, then for the namespace to
        empty by itself; check everything (``close`` drains the pools)."""
        self.note_breaches("while the jobs were held")
        for gate in ("g1", "g2"):
            self.evidence.open(gate)
        for call in self.calls:
            if call.worker in self.dead:
                continue
            try:
                self.answer(call)
            except AssertionError as error:
                self.problems.append(f"{call.role} call {call.cid} ({call.key}) hangs: {error}")
        if not within(lambda: namespace_keys(self.server.url, self.namespace) == [], IDLE):
            left = namespace_keys(self.server.url, self.namespace)
            self.problems.append(f"left in Redis {IDLE} s after the last answer: {left}")
        self.check_answers()
        self.check_fates()
        self.note_breaches("over the whole run")
        self._sampling.set()
        self._sampler.join()
        # Redis's counts lag the jobs' own evidence by a finish's round trip
        relaxed = [(start, end + COUNT_LAG) for start, end in self.relaxed()]
        counted = [(r, q) for at, r, q in self.samples if not any(a <= at < b for a, b in relaxed)]
        running = max((r for r, _ in counted), default=0)
        queued = max((q for _, q in counted), default=0)
        if running > SLOTS or queued > QUEUE:
            self.problems.append(f"Redis counted up to {running} running / {queued} queued")

    def relaxed(self) -> list[tuple[float, float]]:
        """The windows where only per-process limits must hold: a local fallback's, until
        the last job started meanwhile has ended; a paused worker's, until its job ends."""
        spans = self.evidence.spans()
        windows = []
        for down, back in self.windows:
            ends = [s.end or time.monotonic() for s in spans if down <= s.start < back]
            windows.append((down, max([back, *ends])))
        for paused, key in self.overlaps:
            ends = [s.end or float("inf") for s in spans if s.key == key and s.start < paused]
            windows.append((paused, max(ends, default=paused)))
        return windows

    def note_breaches(self, when: str) -> None:
        breaches = [
            b for b in self.evidence.breaches(SLOTS, self.relaxed()) if b not in self.breaches
        ]
        self.breaches += breaches
        self.problems += [f"limits broken ({when}): {breach}" for breach in breaches[:4]]
        if len(breaches) > 4:
            self.problems.append(f"... and {len(breaches) - 4} more moments like these")

    def check_answers(self) -> None:
        started = {cid for cid, fate in self.evidence.fates().items() if "start" in fate}
        for call in self.calls:
            if call.worker in self.dead or call.answer is None:
                continue
            got = OK if "ok" in call.answer else call.answer["error"]
            allowed = ALLOWED[call.role] | ({CANCELLED} if call.cancelled else set())
            if got not in allowed:
                self.problems.append(f"{call.role} call for {call.key}: {call.answer}")
            elif got == OK and call.answer["ok"] != call.key:
                self.problems.append(f"{call.role} call for {call.key} got {call.answer['ok']}")
            if call.cid in started and got not in (OK, CANCELLED):
                self.problems.append(f"the job of {call.cid} ran, its caller got {call.answer}")

    def check_fates(self) -> None:
        """Exactly one of fn() and on_drop() per call (of a live worker), eventually."""
        calls = [call for call in self.calls if call.worker not in self.dead]

        def wrong() -> list[str]:
            fates = self.evidence.fates()
            return [
                f"{call.role} call {call.cid} for {call.key} ({call.answer}): "
                f"{fates.get(call.cid, 'neither fn nor on_drop')}"
                for call in calls
                if len(fates.get(call.cid, [])) != 1
            ]

        within(lambda: not wrong(), 2.0)
        self.problems += [f"not exactly one of fn()/on_drop(): {w}" for w in wrong()]

    def _sample(self) -> None:
        while not self._sampling.wait(0.01):
            if self.observer.mode != "redis":
                continue
            try:
                reading = (self.observer.running(), self.observer.queued())
                self.samples.append((time.monotonic(), *reading))
            except Exception:  # a fault in progress: not a reading
                continue

    # --- the end ------------------------------------------------------------------

    def close(self) -> None:
        """Release everything, drain every live worker's pool, stop the workers."""
        self._sampling.set()
        for gate in ("g1", "g2"):
            self.evidence.open(gate)
        failed = []
        for worker in self.live():
            if worker.process.poll() is None:
                try:
                    worker.ask("drain", pool="p", timeout=15)
                except AssertionError as error:
                    failed.append(f"draining worker {worker.pid}: {error}")
        for worker in self.workers:
            worker.close()
        asyncio.run(asyncio.wait_for(self.observer.stop(), 10))
        assert not failed, failed


@pytest.fixture
def faulty(own_redis: RedisServer, tmp_path: Path) -> Iterator[Callable[..., Faulty]]:
    made: list[Faulty] = []

    def make(fallback: str = "refuse", timeout: float = TIMEOUT) -> Faulty:
        made.append(Faulty(own_redis, tmp_path / "evidence", fallback, timeout))
        return made[-1]

    yield make
    for cluster in made:
        cluster.close()


def verdict(cluster: Faulty) -> None:
    problems = list(dict.fromkeys(cluster.problems))
    if problems and cluster.seen_after is not None:
        running, mode, counted, queued = cluster.seen_after
        problems.append(
            f"(when the after-burst began: {running} running per the jobs; the "
            f"observer ({mode}) read {counted} running, {queued} queued in Redis)"
        )
    assert not problems, "\n".join(problems)


# --- the faults ------------------------------------------------------------------------


def test_kill_9_of_a_worker_holding_slots(faulty):
    """A (running h1, queued q2, a sharer of q1) is SIGKILLed: within the lease plus a
    second, its slot goes to the queue's head (q1) and B's sharer of h1 gets RunnerLost
    (docs/cluster.md: "lease + a few ms", "the tests check lease + 1 s")."""
    c = faulty()
    held = c.hold()
    a = c.workers[0]
    os.kill(a.pid, signal.SIGKILL)
    a.process.wait()
    killed = time.monotonic()
    c.dead.add(a)
    c.evidence.died(a.pid, killed)
    if not within(lambda: c.evidence.running("q1"), LEASE + 1.0):
        c.problems.append("q1 did not take the dead worker's slot within the lease + 1 s")
    if not within(lambda: c.answered(held["s1"]), LEASE + 1.0):
        c.problems.append("B's sharer of the dead worker's h1 not answered within lease + 1 s")
    elif (lost := c.answer(held["s1"])).get("error") != LOST:
        c.problems.append(f"B's sharer of the dead worker's h1 got {lost}, not RunnerLost")
    c.recover()
    c.after()
    c.finish()
    if c.evidence.started("q2"):
        c.problems.append("the dead worker's queued job q2 ran")
    verdict(c)


def test_sigstop_of_a_worker_longer_than_the_lease(faulty):
    """A (running h1, queued q2, a sharer of q1) is paused (SIGSTOP) for the lease and a
    half, as a GC, a debugger or a hung loop would: while it sleeps it is reaped like a
    dead worker (q1 takes its slot, B's sharer of h1 gets RunnerLost); once resumed, its
    h1 is counted again and answers its own callers, and the after-burst shares h1 instead
    of running it again. docs/cluster.md's bound: from the pause until the jobs started
    meanwhile have ended, the cluster may run A's h1 beyond SLOTS (a relaxed window);
    per process, the limits always hold."""
    c = faulty()
    held = c.hold()
    a = c.workers[0]
    os.kill(a.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        if not within(lambda: c.evidence.running("q1"), LEASE + 1.0):
            c.problems.append("q1 did not take the paused worker's slot within lease + 1 s")
        if not within(lambda: c.answered(held["s1"]), LEASE + 1.0):
            c.problems.append("B's sharer of the paused worker's h1 not answered in time")
        elif (lost := c.answer(held["s1"])).get("error") != LOST:
            c.problems.append(f"B's sharer of the paused worker's h1 got {lost}, not RunnerLost")
        until(lambda: time.monotonic() - stopped >= LEASE + 0.5, 5, "the pause")
    finally:
        os.kill(a.pid, signal.SIGCONT)
    c.overlaps.append((stopped, "h1"))
    c.recover()
    if not c.counted():
        c.problems.append("the resumed worker's running h1 is not counted by Redis again")
    c.after()
    c.finish()
    verdict(c)


@pytest.mark.parametrize("pause", ["twice the timeout", "longer than the lease"])
def test_sigstop_of_redis_longer_than_the_timeout(faulty, own_redis, pause):
    """Redis stops answering (SIGSTOP) while calls arrive, one of them cancelled as it
    waits for Redis; then SIGCONT, and what was sent meanwhile runs late. The pause lasts
    at least twice REDIS_TIMEOUT, or longer than the lease by half a lease. (It lasts until
    the calls made meanwhile are refused too, which takes about a lease on a quiet host and
    more on a busy one: "shorter than the lease", as this test once said, did not hold.)
    Leases end only while Redis runs scripts (prelude.lua ``reap``), so however long the
    pause, no lease ends for it: nobody gets RunnerLost, nothing runs beyond SLOTS."""
    c = faulty()
    c.hold()
    a, b, cw = c.workers
    duration = 2 * TIMEOUT if pause.startswith("twice") else LEASE + 0.5
    own_redis.pause()
    paused = time.monotonic()
    try:
        outage = [
            c.call(b, "o-b", "ob", "outage refuse", gate="g1"),
            c.call(cw, "h1", "oc", "outage refuse", gate="g1"),
        ]
        leaving = c.call(a, "o-a", "oa", "outage refuse", gate="g1")
        c.cancel(leaving)  # it leaves while its admission waits for Redis
        for call in outage:
            c.answer(call, ANSWER)
        until(lambda: time.monotonic() - paused >= duration, 5, "the pause")
    finally:
        own_redis.resume()
    c.recover()
    c.after()
    c.finish()
    no_lease_ended(c)
    verdict(c)


def no_lease_ended(c: Faulty) -> None:
    """Nobody was told its job's runner was lost: no lease ended for Redis's pause."""
    lost = [call for call in c.calls if call.answer and call.answer.get("error") == LOST]
    c.problems += [f"{call.role} call for {call.key} got RunnerLost" for call in lost]


def test_sigstop_of_redis_between_two_lease_ends(faulty, own_redis):
    """The busy host's case, made deterministic: worker A's beats are late (A is stopped
    until its lease end is 0.2 s behind B's and C's, as a loaded host delays a process);
    Redis is paused (SIGSTOP) and resumed after A's lease end but before the others'.
    Counted on Redis's clock alone, A's lease would end at the first script after the
    pause while the others' would not: A's running h1 and queued q2 lost, q1 promoted into
    h1's slot, and h1 counted again by A's next beat: 3 running at SLOTS 2 (the flake seen
    as "Redis counted up to 3 running"). Leases end only while Redis runs scripts: none
    ends, nobody gets RunnerLost, SLOTS holds."""
    c = faulty()
    c.hold()
    a = c.workers[0]
    ends: dict[str, float] = {}

    def apart() -> bool:  # A's lease end stays put while B's and C's move on with their beats
        ends.update(lease_ends(own_redis, c.namespace))
        first, *others = sorted(ends.values())
        return min(others) - first > 0.2 and first > time.monotonic()

    os.kill(a.pid, signal.SIGSTOP)
    try:  # polled, not slept: on a busy host the others' beats are late too
        until(apart, LEASE, "A's lease end to fall behind the others' while it still runs")
        own_redis.pause()
    finally:
        os.kill(a.pid, signal.SIGCONT)  # its scripts wait in Redis, not run
    try:
        first, *others = sorted(ends.values())
        resume_at = (first + min(others)) / 2  # after A's lease end, before the others'
        until(lambda: time.monotonic() >= resume_at, 5, "the moment between the lease ends")
    finally:
        own_redis.resume()
    c.recover()
    c.after()
    c.finish()
    no_lease_ended(c)
    verdict(c)


def lease_ends(server: RedisServer, namespace: str) -> dict[str, float]:
    """Each process's lease end, as ``time.monotonic()`` of this host (Redis's clock is this
    host's wall clock)."""
    with redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True) as client:
        seconds, micros = client.time()
        leases = client.zrange("{" + namespace + "}:procs", 0, -1, withscores=True)
    offset = time.monotonic() - (seconds + micros / 1e6)
    return {process: end / 1000 + offset for process, end in leases}


@pytest.mark.parametrize("fallback", ["refuse", "local"])
def test_redis_restarted_empty(faulty, own_redis, fallback):
    """Redis dies (its data with it) under held jobs; calls arrive while it is away (each
    worker: its own running key again, and a fresh one; one caller leaves at once); it
    comes back empty. With "local", the calls made meanwhile run in each worker's own
    pool: limits per process from Redis's failure until it is back and the last job
    started meanwhile has ended (docs/cluster.md: jobs still running in a fallback pool
    are not counted by Redis until they end); cluster-wide everywhere else."""
    c = faulty(fallback)
    c.hold()
    a, b, cw = c.workers
    role = f"outage {fallback}"
    own_redis.kill()
    down = time.monotonic()
    c.call(a, "h1", "oa1", role, sleep=0.1)  # may share the job still running: answered later
    c.call(b, "h2", "ob1", role, sleep=0.1)
    fresh = [
        c.call(a, "o-a", "oa2", role, sleep=0.1),
        c.call(b, "o-b", "ob2", role, sleep=0.1),
        c.call(cw, "o-c", "oc1", role, sleep=0.1),
    ]
    c.cancel(c.call(cw, "o-c2", "oc2", role, sleep=0.1))
    for call in fresh:
        c.answer(call, ANSWER)
    own_redis.forget_saved()
    own_redis.start()
    back = c.recover()
    if fallback == "local":
        c.windows.append((down, back))
    c.after()
    c.finish()
    verdict(c)


@pytest.mark.parametrize("data", ["as saved just before", "saved before the last changes"])
def test_redis_restarted_with_its_data(faulty, own_redis, data):
    """Redis restarts from an RDB dump: made just before (a restart of a persistent
    Redis), or before the last changes (as a failover to a replica that missed the last
    writes): B's h2 ended after the dump and C's q1 took its slot, which the restored
    data does not know; the restored data still has h2 running."""
    c = faulty()
    held = c.hold()
    own_redis.save()
    if data == "saved before the last changes":
        c.evidence.open("g2")  # h2 ends; q1 takes its slot
        c.answer(held["h2"])
        until(lambda: c.evidence.running("q1"), ANSWER, "q1 started")
    own_redis.restart(keep_data=True)
    c.recover()
    c.after()
    c.finish()
    verdict(c)


def test_connections_dropped_mid_script(faulty, own_redis):
    """Scripts on their way are dropped with their connection: Redis holds the scripts
    that arrive (CLIENT PAUSE WRITE) while h2 ends (its finish), a fresh call and a join
    arrive (admissions) and A's sharer of q1 leaves (a leave); once they all wait in
    Redis, every client connection, pub/sub included, is dropped (CLIENT KILL), so none
    of them runs. (A script that runs and whose reply is lost: the SIGSTOP test.)"""
    c = faulty(timeout=3.0)  # the held scripts must still be waiting when they are dropped
    held = c.hold()
    a, _, cw = c.workers
    own_redis.hold_writes(10_000)
    try:
        c.evidence.open("g2")  # h2 ends: B's finish waits in Redis
        c.call(a, "m-a", "ma", "dropped", gate="g1")  # an admission
        c.call(cw, "h1", "mc", "dropped")  # a join of A's running job
        c.cancel(held["s3"])  # A's sharer of q1 leaves
        if not within(lambda: own_redis.blocked() >= 4, 2.0):
            c.problems.append(f"only {own_redis.blocked()} scripts held in Redis, not 4")
        dropped = own_redis.drop_clients("normal", "pubsub")
    finally:
        own_redis.release_writes()
    assert dropped >= 4
    c.recover()
    c.after()
    c.finish()
    verdict(c)


def test_connections_dropped_again_and_again(faulty, own_redis):
    """While two workers send a stream of short calls (one in four leaving at once), the
    client connections are dropped every 150 ms (CLIENT KILL TYPE normal from another
    connection; pub/sub every fifth time): whatever was on its way at each moment, and
    idle connections, whose next call then fails. Each failure sends the worker to its
    fallback for a while, so the stream goes on until a dozen of its jobs have run (or
    for 8 s)."""
    c = faulty()
    c.hold(full=False)  # one slot left free: the stream's jobs run, queue, and leave
    _, b, cw = c.workers
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:
        for n in itertools.count():
            if stop.wait(0.15):
                return
            try:
                kills.append(own_redis.drop_clients("normal", *(["pubsub"] if n % 5 == 4 else [])))
            except Exception:  # the server is busy: next round
                continue

    thread = threading.Thread(target=killer)
    thread.start()
    storm: list[Call] = []

    def ran() -> int:  # the stream's jobs that ran
        keys = {call.key for call in storm}
        return sum(span.key in keys for span in c.evidence.spans())

    try:
        deadline = time.monotonic() + 8.0
        for i in itertools.count():
            if (ran() >= 12 and len(kills) >= 8) or time.monotonic() > deadline:
                break
            for n, worker in ((1, b), (2, cw)):
                call = c.call(worker, f"s{i}-{n}", f"storm-{i}-{n}", "storm", sleep=0.02)
                storm.append(call)
                if i % 4 == 3:
                    c.cancel(call)
            time.sleep(0.02)  # pacing, not ordering
        for call in storm:
            c.answer(call, ANSWER)
    finally:
        stop.set()
        thread.join()
    assert len(kills) >= 8 and sum(kills) >= 8, f"too few connections dropped: {kills}"
    c.after_role = "after drops"
    c.recover()
    c.after()
    c.finish()
    verdict(c)
