"""Mutation run of the pool's rules: one single-line change at a time to each rule of the
local pool (admission/local.py), the Redis pool (side.py and its Lua scripts) and the door's
``decide()``; the rule's test folder is run (``-x``) against each, and the table says which
mutants the tests caught and which survived. ``make mutants``; not part of ``make test``.

    python tools/mutate_rules.py [--only WORD] [--list] [--no-baseline]

A mutant survives when its folder passes with it: a rule without a test that breaks when
the rule breaks. The source is restored after each mutant, however the run ends.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = "django_pdfpool"
LOCAL, JOBS = f"{PKG}/admission/local.py", f"{PKG}/admission/jobs.py"
SIDE, LUA = f"{PKG}/admission/redis/side.py", f"{PKG}/admission/redis/lua"
RULES = f"{PKG}/door.py"


@dataclass(frozen=True)
class Mutant:
    rule: str
    path: str
    old: str  # found exactly once in the file; the change is to one line of it
    new: str
    suite: str  # "local", "redis" or "door"


MUTANTS = [
    # --- the local pool ---------------------------------------------------------------------
    Mutant(
        "slots",
        LOCAL,
        "        if self._running < self.slots:\n            self._start(job)",
        "        if self._running <= self.slots:\n            self._start(job)",
        "local",
    ),
    Mutant(
        "queue",
        LOCAL,
        "and len(self._queue) >= self.queue_size\n",
        "and len(self._queue) > self.queue_size\n",
        "local",
    ),
    Mutant(
        "wait",
        LOCAL,
        "            if self.wait is not None:\n                jobs.call_in_job_loop(self._arm",
        "            if self.wait is None:\n                jobs.call_in_job_loop(self._arm",
        "local",
    ),
    Mutant(
        "single-flight join",
        LOCAL,
        "if job is not None:  # Rule 1",
        "if job is not None and False:  # Rule 1",
        "local",
    ),
    Mutant(
        "join takes no slot or queue place",
        LOCAL,
        "if job is not None:  # Rule 1",
        "if job is not None and len(self._queue) < self.queue_size:  # Rule 1",
        "local",
    ),
    Mutant(
        "join even for a caller with a job in flight",
        LOCAL,
        "if job is not None:  # Rule 1",
        "if job is not None and caller not in self._callers:  # Rule 1",
        "local",
    ),
    Mutant(
        "one job per caller",
        LOCAL,
        "if held is not None or full:",
        "if full:",
        "local",
    ),
    Mutant(
        "caller away does not cancel",
        LOCAL,
        "            self._leave(job, waiter)\n",
        "            self._leave(job, waiter); job.task and job.task.cancel()\n",
        "local",
    ),
    Mutant(
        "a queued job left by all gives up its place",
        LOCAL,
        'if job.state != "queued" or job.waiters:',
        "if True:",
        "local",
    ),
    Mutant(
        "error reaches every sharer",
        LOCAL,
        "        jobs.deliver(waiters, result, error)\n",
        "        jobs.deliver(waiters if error is None else list(waiters)[:1], result, error)\n",
        "local",
    ),
    Mutant(
        "error frees the slot",
        LOCAL,
        "            self._running -= 1\n",
        "            self._running -= 0 if error else 1\n",
        "local",
    ),
    Mutant(
        "error frees the caller",
        LOCAL,
        "if self._callers.get(job.caller) is job:",
        "if self._callers.get(job.caller) is job and error is None:",
        "local",
    ),
    Mutant(
        "unobserved fault logged",
        JOBS,
        'logger.warning("job %s failed',
        'logger.debug("job %s failed',
        "local",
    ),
    Mutant(
        "drain waits for what runs",
        LOCAL,
        "        self.close()\n        await self._until_idle()",
        "        self.close()\n        return",
        "local",
    ),
    Mutant(
        "stop cancels what runs",
        LOCAL,
        "    for job in running:\n        job.stop()",
        "    for job in running:\n        pass",
        "local",
    ),
    # --- the Redis pool ---------------------------------------------------------------------
    Mutant(
        "slots", f"{LUA}/admit.lua", "if running < SLOTS then", "if running <= SLOTS then", "redis"
    ),
    Mutant(
        "queue",
        f"{LUA}/admit.lua",
        "queued >= tonumber(ARGV[4]) then  -- rule 3",
        "queued > tonumber(ARGV[4]) then  --",
        "redis",
    ),
    Mutant("wait", f"{LUA}/admit.lua", "'dl', wait >= 0 and NOW + wait or 0)", "'dl', 0)", "redis"),
    Mutant(
        "single-flight join",
        f"{LUA}/admit.lua",
        "if job then  -- rule 1",
        "if false then  -- rule 1",
        "redis",
    ),
    Mutant(
        "join takes no slot or queue place",
        f"{LUA}/admit.lua",
        "if job then  -- rule 1",
        "if job and redis.call('SCARD', RUNNING) < SLOTS then  -- rule 1",
        "redis",
    ),
    Mutant(
        "join even for a caller with a job in flight",
        f"{LUA}/admit.lua",
        "if job then  -- rule 1",
        "if job and not redis.call('HGET', CALLERS, ARGV[7]) then  -- rule 1",
        "redis",
    ),
    Mutant(
        "one job per caller",
        f"{LUA}/admit.lua",
        "if other and other.caller == CALLER then",
        "if false then",
        "redis",
    ),
    Mutant(
        "caller away does not cancel",
        SIDE,
        "            job.waiters.discard(waiter)\n",
        "            job.waiters.discard(waiter); job.task and job.task.cancel()\n",
        "redis",
    ),
    Mutant(
        "error reaches every sharer",
        SIDE,
        "        jobs.deliver(waiters, result, error)\n",
        "        jobs.deliver(waiters if error is None else list(waiters)[:1], result, error)\n",
        "redis",
    ),
    Mutant(
        "error frees the slot and the caller",
        f"{LUA}/finish.lua",
        "forget(job)  -- rule 5",
        "-- forget(job)  -- rule 5",
        "redis",
    ),
    Mutant(
        "unobserved fault logged",
        SIDE,
        "error is not None and not job.cancelled(task):\n            jobs.report_failure",
        "error is not None and job.cancelled(task):\n            jobs.report_failure",
        "redis",
    ),
    Mutant(
        "stop cancels what runs",
        SIDE,
        "        for job in running:\n            job.stop()",
        "        for job in running:\n            pass",
        "redis",
    ),
    # --- the door's decide() ----------------------------------------------------------------
    Mutant("door: closed", RULES, "    if pressure.closed:\n", "    if False:\n", "door"),
    Mutant(
        "door: a body that holds no PDF",
        RULES,
        "if upload.holds_no_pdf(framework):",
        "if False:",
        "door",
    ),
    Mutant(
        "door: join takes no place",
        RULES,
        "(pressure.in_flight or arrivals.carries(key)):",
        "(arrivals.carries(key)):",
        "door",
    ),
    Mutant(
        "door: one job per caller",
        RULES,
        "busy = known and pressure.caller_busy",
        "busy = False",
        "door",
    ),
    Mutant(
        "door: a full pool refuses",
        RULES,
        "arrivals.place(pressure.free, who, key, sizes)",
        "arrivals.place(pressure.free + 1, who, key, sizes)",
        "door",
    ),
    Mutant(
        "door: one budget entry per caller",
        RULES,
        "len(same) >= most or len(mine) >= mine_most:",
        "len(same) >= most or len(mine) > mine_most:",
        "door",
    ),
    Mutant(
        "door: carried is not in flight",
        RULES,
        "return may_join(pressure.in_flight)",
        "return may_join(True)",
        "door",
    ),
    Mutant(
        "door: entries per digest in flight only",
        RULES,
        "return may_join() if may_start else refused(False)",
        "return may_join(True) if may_start else refused(False)",
        "door",
    ),
]

# Each suite's tests: the rule's folder (tests laid out like the package); the given
# conformance test stays at the top of tests/, where it was given.
CONFORMANCE = "tests/test_pool_conformance.py"
SUPPORT = "tests.support"
SUITES: dict[str, list[str]] = {
    "local": [CONFORMANCE, "tests/admission", "--ignore=tests/admission/redis"],
    "redis": ["tests/admission/redis"],
    "door": [
        "tests/test_door.py",
        "tests/test_door_steps.py",
        "tests/test_door_pressure.py",
        "tests/test_middleware.py",
    ],
}
PYTEST = [
    sys.executable,
    "-m",
    "pytest",
    "-x",
    "-q",
    "-p",
    "no:randomly",
    "-p",
    "no:cacheprovider",
    "--timeout=90",
]


def run_suite(suite: str) -> str | None:
    """None if the suite passes (the mutant survives), else the first test that failed."""
    commands = [PYTEST + SUITES[suite]]
    if suite == "redis":  # the given conformance test against the Redis pool, first (fast)
        commands.insert(0, [sys.executable, "-m", f"{SUPPORT}.redis_server", *PYTEST, CONFORMANCE])
    env = {**os.environ, "PDFPOOL_TEST_POOL": f"{SUPPORT}.redis_factory:make_pool"}
    for i, command in enumerate(commands):
        e = env if suite == "redis" and i == 0 else os.environ
        done = subprocess.run(command, cwd=ROOT, env=e, capture_output=True, text=True)
        if done.returncode != 0:
            failed = [
                line.split()[1]
                for line in done.stdout.splitlines()
                if line.startswith(("FAILED tests/", "ERROR tests/"))
            ]
            where = "(Redis) " if suite == "redis" and i == 0 else ""
            return where + (failed[0] if failed else f"exit {done.returncode}")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the mutants whose rule or suite contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip running each suite unmutated first"
    )
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or args.only in f"{m.suite} {m.rule}"]
    for m in chosen:
        text = (ROOT / m.path).read_text()
        if text.count(m.old) != 1:
            print(f"mutant {m.suite}/{m.rule}: {m.old!r} is not once in {m.path}", file=sys.stderr)
            return 2
    if args.list:
        for m in chosen:
            print(f"{m.suite:6} {m.rule:45} {m.path}")
        return 0
    if not args.no_baseline:  # a suite failing unmutated would "catch" every mutant
        for suite in sorted({m.suite for m in chosen}):
            started = time.monotonic()
            failed = run_suite(suite)
            if failed is not None:
                print(
                    f"the {suite} suite fails without a mutant ({failed}): fix it first",
                    file=sys.stderr,
                )
                return 2
            print(f"baseline {suite}: passes ({time.monotonic() - started:.0f} s)", flush=True)
    survived = 0
    print(f"{'suite':6} {'rule':45} {'result':8} seconds  file; caught by")
    for m in chosen:
        path = ROOT / m.path
        original = path.read_text()
        started = time.monotonic()
        try:
            path.write_text(original.replace(m.old, m.new))
            caught_by = run_suite(m.suite)
        finally:
            path.write_text(original)
        survived += caught_by is None
        result = "SURVIVED" if caught_by is None else "caught"
        took = time.monotonic() - started
        where = m.path.removeprefix(f"{PKG}/")
        print(f"{m.suite:6} {m.rule:45} {result:8} {took:7.0f}  {where}; {caught_by}", flush=True)
    print(f"{len(chosen) - survived} caught, {survived} survived, of {len(chosen)}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
