"""How honest a pool's Retry-After is: for each refusal, the Retry-After it gave against the
time until a place (or, for a 429, the caller's job) actually freed.

    python tools/calibrate_retry_after.py [--seconds 120] [--seed 1]
    python -m tests.support.redis_server python tools/calibrate_retry_after.py --redis

A pool of 2 slots and 2 queue places (wait 8 s) serves 10 callers for ``--seconds``. Each
caller runs jobs that sleep 0.4, 1, 2 or 4.5 s (+-20 %), one after another, and now and then
sends a second job while its first runs (a second tab: a 429). A refused caller waits the
Retry-After a client would read (whole seconds, at least 1) and sends the same job again.
Every job's end and every give-up is timed, so that each refusal's true wait is known:

- 503 for a full queue: until the first job ended or was given up after the refusal (a place
  freed);
- 503 after waiting ``wait`` in the queue: until the first job ended after it (a slot freed);
- 429: until the caller's job in flight ended.

Printed per kind and in all: refusals, the share whose Retry-After is shorter than the true
wait, and the median of Retry-After over the true wait (``raw``: the exception's own value,
before the header's rounding up). The goal: at most 10 % shorter, the median within 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from django_pdfpool.exceptions import CallerBusy, PoolBusy

SLOTS, QUEUE, WAIT, CALLERS = 2, 2, 8.0, 10
LENGTHS = (0.4, 1.0, 2.0, 4.5)


@dataclass
class Refusal:
    kind: str  # "full", "waited" or "caller"
    at: float
    header: int  # the Retry-After a client reads: whole seconds, at least 1
    raw: float  # the exception's retry_after
    holder: Job | None = None  # a 429's: the caller's job in flight


@dataclass
class Job:
    caller: str
    length: float
    ended: float | None = None  # when it ended or was given up


@dataclass
class Run:
    started: float = field(default_factory=time.monotonic)
    refusals: list[Refusal] = field(default_factory=list)
    frees: list[float] = field(default_factory=list)  # a job ended, or was given up
    ends: list[float] = field(default_factory=list)  # a job ended (a slot freed)
    holding: dict[str, Job] = field(default_factory=dict)  # each caller's job in flight


def make_pool(redis: bool) -> Any:
    if redis:
        from uuid import uuid4

        from django_pdfpool.admission import RedisPool

        url = os.environ["PDFPOOL_TEST_REDIS_URL"]
        return RedisPool(SLOTS, QUEUE, WAIT, url=url, namespace=f"calib-{uuid4().hex}")
    from django_pdfpool.admission import Pool

    return Pool(SLOTS, QUEUE, WAIT)


async def submit(pool: Any, run: Run, job: Job, rng: random.Random, deadline: float) -> None:
    """Send ``job`` until it runs (or the run ends), waiting each Retry-After."""
    key = f"{job.caller}-{rng.random()}"

    async def fn() -> None:
        await asyncio.sleep(job.length)
        now = time.monotonic()
        run.ends.append(now)
        run.frees.append(now)

    while time.monotonic() < deadline:
        sent = time.monotonic()
        mine = run.holding.get(job.caller)
        try:
            if mine is None:
                run.holding[job.caller] = job
            await pool.run(key, job.caller, fn)
            job.ended = time.monotonic()
            return
        except (PoolBusy, CallerBusy) as refused:
            now = time.monotonic()
            if isinstance(refused, CallerBusy):
                kind = "caller"
            else:
                kind = "waited" if now - sent > WAIT / 2 else "full"
                if kind == "waited":
                    run.frees.append(now)
            header = max(1, math.ceil(refused.retry_after))
            run.refusals.append(Refusal(kind, now, header, refused.retry_after, mine))
        finally:
            if run.holding.get(job.caller) is job:
                job.ended = job.ended or time.monotonic()
                del run.holding[job.caller]
        await asyncio.sleep(header)


async def caller(pool: Any, run: Run, name: str, rng: random.Random, deadline: float) -> None:
    tabs: set[asyncio.Task[None]] = set()
    while time.monotonic() < deadline:
        length = rng.choice(LENGTHS) * rng.uniform(0.8, 1.2)
        first = asyncio.ensure_future(submit(pool, run, Job(name, length), rng, deadline))
        if rng.random() < 0.3:  # a second tab, while the first is in flight
            await asyncio.sleep(rng.uniform(0.05, 0.5))
            other = Job(name, rng.choice(LENGTHS))
            tab = asyncio.ensure_future(submit(pool, run, other, rng, deadline))
            tabs.add(tab)
            tab.add_done_callback(tabs.discard)
        await first
        await asyncio.sleep(rng.uniform(0.0, 1.0))
    await asyncio.gather(*tabs)


def truth(run: Run, refusal: Refusal) -> float | None:
    """Seconds from the refusal until what it waited on freed; None if not seen."""
    if refusal.kind == "caller":
        ended = refusal.holder.ended if refusal.holder else None
        return None if ended is None else max(0.0, ended - refusal.at)
    times = run.frees if refusal.kind == "full" else run.ends
    later = [t for t in times if t > refusal.at]
    return min(later) - refusal.at if later else None


def report(run: Run) -> None:
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for refusal in run.refusals:
        real = truth(run, refusal)
        if real is not None and real > 0:
            rows.setdefault(refusal.kind, []).append((refusal.header, refusal.raw, real))
    every = [row for kind in rows.values() for row in kind]
    print(f"{'kind':8} {'n':>5} {'shorter':>8} {'median RA/true':>15} {'raw':>6} {'raw<1s':>7}")
    for kind, found in [*sorted(rows.items()), ("all", every)]:
        if not found:
            continue
        shorter = sum(header < real for header, _, real in found) / len(found)
        ratio = statistics.median(header / real for header, _, real in found)
        raw = statistics.median(raw / real for _, raw, real in found)
        under = sum(value < 1 for _, value, _ in found)
        print(f"{kind:8} {len(found):5d} {shorter:8.1%} {ratio:15.2f} {raw:6.2f} {under:7d}")


async def main(seconds: float, seed: int, redis: bool) -> None:
    pool = make_pool(redis)
    run, rng = Run(), random.Random(seed)
    deadline = time.monotonic() + seconds
    await asyncio.gather(
        *(caller(pool, run, f"c{i}", random.Random(rng.random()), deadline) for i in range(CALLERS))
    )
    await pool.drain()
    report(run)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis", action="store_true")
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.seed, options.redis))
