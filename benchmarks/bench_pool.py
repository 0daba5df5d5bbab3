"""What the pool costs over the admission code a user would write by hand, in one run.

``python benchmarks/bench_pool.py [--quick]``: the pool (``django_pdfpool.admission.Pool``)
against ``Baseline`` (an ``asyncio.Semaphore`` and a dict of shared futures on one event loop,
with the same rules where one loop can have them), per job, per refusal and per sharer; ratio =
pool / baseline. The pool runs every job on its own loop thread, so that a job outlives the
request and loop that started it and callers on any loop share it: two thread hand-offs per
job, which the baseline cannot do and does not pay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django_pdfpool.admission import Pool
from django_pdfpool.exceptions import CallerBusy, PoolBusy

JobFn = Callable[[], Awaitable[Any]]
Impl = Callable[[int, int, float | None], Any]  # (slots, queue, wait) -> a Pool or Baseline


class Baseline:
    """Hand-written admission on one event loop: a Semaphore, a dict of shared futures,
    a set of busy callers, a bounded count of jobs in flight. Jobs run on the caller's
    loop, so a job dies with the task (and loop) that started it, and every caller
    must be on that one loop: exactly what the pool's job thread pays for."""

    def __init__(self, slots: int = 2, queue: int = 4, wait: float | None = 10.0) -> None:
        self._semaphore = asyncio.Semaphore(slots)
        self._limit = slots + queue  # jobs running or waiting for a slot
        self._wait = wait
        self._shared: dict[str, asyncio.Future[Any]] = {}
        self._callers: set[str] = set()

    async def run(self, key: str, caller: str, fn: JobFn | None) -> Any:
        shared = self._shared.get(key)
        if shared is not None:  # join: a sharer leaving must not cancel the job
            return await asyncio.shield(shared)
        if fn is None:
            raise ValueError(f"nothing to join for key {key!r}, and no fn to start a job")
        if caller in self._callers:
            raise CallerBusy("this caller already has a job in flight")
        if len(self._shared) >= self._limit:
            raise PoolBusy("every slot is taken and the queue is full")
        shared = self._shared[key] = asyncio.get_running_loop().create_future()
        self._callers.add(caller)
        try:
            if self._semaphore.locked():  # queue, at most `wait` seconds
                try:
                    async with asyncio.timeout(self._wait):
                        await self._semaphore.acquire()
                except TimeoutError:
                    raise PoolBusy(f"waited {self._wait:g} s for a slot") from None
            else:
                await self._semaphore.acquire()
            try:
                result = await fn()
            finally:
                self._semaphore.release()
        except asyncio.CancelledError:
            shared.cancel()  # the starter left: the job dies for every sharer
            raise
        except BaseException as error:
            shared.set_exception(error)
            shared.exception()  # mark it retrieved even if nobody shared it
            raise
        else:
            shared.set_result(result)
            return result
        finally:
            del self._shared[key]
            self._callers.discard(caller)


# --- helpers ----------------------------------------------------------------


class Gate:
    """Holds jobs, on whatever loop they run, until opened; no polling."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened = False
        self._held: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def holding(self) -> int:
        return len(self._held)

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._opened:
                return
            self._held.append((loop, future))
        await future

    def open(self) -> None:
        with self._lock:
            self._opened = True
            held, self._held = self._held, []
        for loop, future in held:
            loop.call_soon_threadsafe(future.set_result, None)


async def nothing() -> int:
    return 1


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("benchmark setup did not settle")
        await asyncio.sleep(0.0005)


def percentile(sorted_ns: list[int], fraction: float) -> float:
    """The value at ``fraction`` of sorted nanosecond samples, in microseconds."""
    return sorted_ns[min(len(sorted_ns) - 1, int(fraction * len(sorted_ns)))] / 1e3


def median_of(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


# --- measurements -----------------------------------------------------------


async def uncontended(pools: dict[str, Any], ops: int) -> dict[str, dict[str, float]]:
    """Sequential awaits of a no-op job, one at a time, after warm-up. Several pools
    are measured in alternating chunks, so that each sees the same machine."""
    samples: dict[str, list[int]] = {name: [] for name in pools}
    clock = time.perf_counter_ns
    for pool in pools.values():
        for _ in range(max(200, ops // 10)):
            await pool.run("k", "c", nothing)
    gc.collect()
    chunk = 500
    for _ in range(0, ops, chunk):
        for name, pool in pools.items():
            times = samples[name]
            for _ in range(chunk):
                start = clock()
                await pool.run("k", "c", nothing)
                times.append(clock() - start)
    figures = {}
    for name, times in samples.items():
        times.sort()
        figures[name] = {
            "median": percentile(times, 0.5),
            "p99": percentile(times, 0.99),
            "throughput": len(times) / (sum(times) / 1e9),
        }
    return figures


async def refusals(impl: Impl, ops: int) -> dict[str, float]:
    """Every slot held and the queue full: refused calls, PoolBusy then CallerBusy."""
    slots, queue = 2, 4
    pool = impl(slots, queue, 30.0)
    gate = Gate()
    holders = [
        asyncio.create_task(pool.run(f"held{i}", f"holder{i}", gate.wait))
        for i in range(slots + queue)
    ]
    await until(lambda: gate.holding() == slots)  # both slots taken, the queue full
    figures: dict[str, float] = {}
    clock = time.perf_counter_ns
    for name, caller, refusal in (("busy", "other", PoolBusy), ("caller", "holder0", CallerBusy)):
        for _ in range(1000):  # warm-up
            with contextlib.suppress(refusal):
                await pool.run("refused", caller, nothing)
        gc.collect()
        samples, refused = [], 0
        for _ in range(ops):
            start = clock()
            try:
                await pool.run("refused", caller, nothing)
            except refusal:
                refused += 1
            samples.append(clock() - start)
        if refused != ops:
            raise RuntimeError(f"expected every call refused with {refusal.__name__}")
        samples.sort()
        figures[f"{name} median"] = percentile(samples, 0.5)
    gate.open()
    await asyncio.gather(*holders)
    return figures


async def sharers(impl: Impl, count: int, repeats: int) -> dict[str, float]:
    """One held job; ``count`` tasks join it (fn=None); then the gate opens."""
    admits, releases = [], []
    for _ in range(repeats):
        pool = impl(2, 4, 30.0)
        gate = Gate()
        starter = asyncio.create_task(pool.run("shared", "starter", gate.wait))
        await until(lambda gate=gate: gate.holding() == 1)
        gc.collect()
        start = time.perf_counter()
        tasks = [asyncio.create_task(pool.run("shared", f"s{i}", None)) for i in range(count)]
        await asyncio.sleep(0)  # every task takes its first step: all have joined
        admitted = time.perf_counter()
        if isinstance(pool, Pool) and pool.waiting("shared") != count:
            raise RuntimeError("not every sharer joined")
        released = time.perf_counter()
        gate.open()
        results = await asyncio.gather(starter, *tasks)
        done = time.perf_counter()
        if results.count(None) != count + 1:
            raise RuntimeError("a sharer got the wrong result")
        admits.append(admitted - start)
        releases.append(done - released)
    return {"admit": median_of(admits) * 1e3, "release": median_of(releases) * 1e3}


# --- report -----------------------------------------------------------------


Row = tuple[str, str, str, str]


async def measure(quick: bool) -> list[Row]:
    """Every figure, pool then baseline: the table's rows."""
    ops = 3000 if quick else 20000
    refused_ops = 5000 if quick else 50000
    repeats = 1 if quick else 3
    implementations: dict[str, Impl] = {"pool": Pool, "baseline": Baseline}
    got: dict[str, dict[str, float]] = {name: {} for name in implementations}
    alone = await uncontended({"pool": Pool(2, 4, 10.0), "baseline": Baseline(2, 4, 10.0)}, ops)
    for name, impl in implementations.items():
        got[name].update({f"job {k}": v for k, v in alone[name].items()})
        got[name].update(await refusals(impl, refused_ops))
        got[name].update(
            {f"share {k}": v for k, v in (await sharers(impl, 10000, repeats)).items()}
        )

    rows: list[Row] = []
    for operation, key, unit in (
        ("uncontended job, median", "job median", "us"),
        ("uncontended job, p99", "job p99", "us"),
        ("uncontended jobs/s, sequential", "job throughput", "/s"),
        ("refusal PoolBusy (slots and queue full), median", "busy median", "us"),
        ("refusal CallerBusy, median", "caller median", "us"),
        ("10,000 sharers join one held job (incl. task creation)", "share admit", "ms"),
        ("10,000 sharers: gate open until all have the result", "share release", "ms"),
    ):
        pool, base = got["pool"][key], got["baseline"][key]
        rows.append(
            (operation, f"{pool:,.2f} {unit}", f"{base:,.2f} {unit}", f"{pool / base:.2g}x")
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    rows = asyncio.run(measure(args.quick))
    cpus = os.cpu_count()
    print(
        f"machine: Python {platform.python_version()}, {platform.system()} {platform.machine()}"
        f", {cpus} CPUs; {'quick' if args.quick else 'full'}; slots=2; ratio = pool / baseline"
    )
    print()
    print("| operation | pool | baseline | ratio |\n|---|---:|---:|---:|")
    print("\n".join(f"| {' | '.join(row)} |" for row in rows))
    print(f"whole run: {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
