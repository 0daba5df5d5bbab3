"""What sharing the pool through Redis costs, against the in-process pool in the same run.

``python benchmarks/bench_redis.py [--quick]`` starts its own redis-server (a free port, no
persistence) and times sequential no-op jobs through ``Pool`` and ``RedisPool`` (an admit
script, a finish script, two thread hand-offs), a job shared by a second ``RedisPool`` (the
outcome travels as JSON through Redis), and refusals (``PoolBusy``, ``CallerBusy``) one at a
time and from 64 concurrent callers; ratio = RedisPool / Pool.
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
from typing import Any
from uuid import uuid4

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from django_pdfpool.admission import Pool, RedisPool  # noqa: E402
from django_pdfpool.exceptions import CallerBusy, PoolBusy  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

SLOTS, QUEUE = 2, 4


async def nothing() -> str:
    return "ok"


def stats(samples_ns: list[int]) -> dict[str, float]:
    samples_ns.sort()
    n = len(samples_ns)
    return {
        "median": samples_ns[n // 2] / 1e3,
        "p99": samples_ns[min(n - 1, int(0.99 * n))] / 1e3,
        "per_s": n / (sum(samples_ns) / 1e9),
    }


async def per_job(pool: Any, ops: int) -> dict[str, float]:
    for _ in range(max(100, ops // 10)):
        await pool.run("k", "c", nothing)
    gc.collect()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(ops):
        start = clock()
        await pool.run("k", "c", nothing)
        samples.append(clock() - start)
    return stats(samples)


async def shared_job(here: RedisPool, there: RedisPool, ops: int) -> dict[str, float]:
    """A held job here, a sharer there: from the gate opening to the sharer's answer
    (the finish script, the ``done`` event, the sharer's read, a JSON decode)."""
    samples = []
    for i in range(ops):
        gate = threading.Event()

        async def job(gate: threading.Event = gate) -> dict[str, Any]:
            while not gate.is_set():
                await asyncio.sleep(0.0002)
            return {"text": "x" * 1000, "pages": 1}

        starter = asyncio.create_task(here.run(f"s{i}", "a", job))
        while here.running() == 0:
            await asyncio.sleep(0.0005)
        sharer = asyncio.create_task(there.run(f"s{i}", "b", None))
        while here.waiting(f"s{i}") == 0:
            await asyncio.sleep(0.0005)
        start = time.perf_counter_ns()
        gate.set()
        await sharer
        samples.append(time.perf_counter_ns() - start)
        await starter
    return stats(samples)


async def refusals(pool: Any, ops: int) -> dict[str, float]:
    """Slots and queue held; refused calls one at a time, then 64 at once."""
    release = threading.Event()

    async def hold() -> None:
        while not release.is_set():
            await asyncio.sleep(0.001)

    holders = [
        asyncio.create_task(pool.run(f"held{i}", f"holder{i}", hold)) for i in range(SLOTS + QUEUE)
    ]
    while pool.running() + pool.queued() < SLOTS + QUEUE:
        await asyncio.sleep(0.001)
    figures: dict[str, float] = {}
    for name, caller, refusal in (("busy", "other", PoolBusy), ("caller", "holder0", CallerBusy)):
        for _ in range(200):
            with contextlib.suppress(refusal):
                await pool.run("refused", caller, nothing)
        samples = []
        for _ in range(ops):
            start = time.perf_counter_ns()
            try:
                await pool.run("refused", caller, nothing)
            except refusal:
                pass
            else:
                raise RuntimeError("a call expected to be refused ran")
            samples.append(time.perf_counter_ns() - start)
        one = stats(samples)
        figures[f"{name} median"] = one["median"]

        async def hammer(caller: str = caller, refusal: type[Exception] = refusal) -> None:
            for _ in range(ops // 64):
                with contextlib.suppress(refusal):
                    await pool.run("refused", caller, nothing)

        start = time.perf_counter()
        await asyncio.gather(*(hammer() for _ in range(64)))
        figures[f"{name} per_s"] = 64 * (ops // 64) / (time.perf_counter() - start)
    release.set()
    await asyncio.gather(*holders)
    return figures


def in_process(url: str, quick: bool) -> None:
    ops = 1000 if quick else 5000

    async def measure() -> dict[str, dict[str, float]]:
        ns = f"bench-{uuid4().hex[:8]}"
        local = Pool(SLOTS, QUEUE, 10.0)
        shared = RedisPool(SLOTS, QUEUE, 10.0, url=url, namespace=ns)
        other = RedisPool(SLOTS, QUEUE, 10.0, url=url, namespace=ns)
        got = {
            "local job": await per_job(local, ops),
            "redis job": await per_job(shared, ops),
            "redis shared": await shared_job(shared, other, 50 if quick else 200),
        }
        refusing = RedisPool(SLOTS, QUEUE, None, url=url, namespace=f"bench-{uuid4().hex[:8]}")
        got["local refusals"] = await refusals(Pool(SLOTS, QUEUE, 30.0), ops)
        got["redis refusals"] = await refusals(refusing, ops)
        await asyncio.gather(shared.drain(), other.drain(), refusing.drain())
        return got

    got = asyncio.run(measure())
    lj, rj, sh = got["local job"], got["redis job"], got["redis shared"]
    lr, rr = got["local refusals"], got["redis refusals"]
    rows = [
        ("uncontended job, median us", lj["median"], rj["median"]),
        ("uncontended job, p99 us", lj["p99"], rj["p99"]),
        ("uncontended jobs/s, sequential", lj["per_s"], rj["per_s"]),
        ("a sharer in another process: job end to its answer, median us", None, sh["median"]),
    ]
    for name, label in (("busy", "PoolBusy"), ("caller", "CallerBusy")):
        rows.append((f"refusal {label}, median us", lr[name + " median"], rr[name + " median"]))
        rows.append((f"refusals {label}/s, 64 callers", lr[name + " per_s"], rr[name + " per_s"]))
    print("| operation | Pool | RedisPool | ratio |\n|---|---:|---:|---:|")
    for label, local, redis in rows:
        ratio = "-" if local is None else f"{redis / local:.2g}x"
        shown = "-" if local is None else f"{local:,.1f}"
        print(f"| {label} | {shown} | {redis:,.1f} | {ratio} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args(argv)
    cpus = os.cpu_count()
    print(
        f"machine: Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}, {cpus} CPUs; redis-server on loopback; slots={SLOTS}"
    )
    with RedisServer() as server:
        in_process(server.url, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
