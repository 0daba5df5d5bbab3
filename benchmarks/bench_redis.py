"""What sharing the pool through Redis costs, and what it buys.

``python benchmarks/bench_redis.py [--quick] [--no-uvicorn]`` starts its own
redis-server (``tests.support.redis_server``: a free port, no persistence) and prints:

1. Per-job cost: sequential no-op jobs through ``Pool`` (in process) and through
   ``RedisPool`` (one admit script, one finish script, two thread hand-offs), and
   a job shared by a caller in a second ``RedisPool`` (another process id: the
   outcome travels as JSON through Redis).
2. Refusals: ``PoolBusy`` (slots and queue full) and ``CallerBusy``, one at a time
   (latency) and from 64 concurrent callers (refusals per second).
3. The point of it all: three uvicorn workers (``tests.project.asgi``) take the same burst
   of distinct slow PDFs, once with local pools and once with the Redis pool, while
   the extraction children on the host are counted: local pools allow 3 x SLOTS at
   once, the Redis pool SLOTS (a ``PDFPOOL["REDIS"]`` dict).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any
from uuid import uuid4

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from django_pdfpool.admission import Pool, RedisPool  # noqa: E402
from django_pdfpool.exceptions import CallerBusy, PoolBusy  # noqa: E402
from tests.support.pdfs import slow_pdf  # noqa: E402
from tests.support.redis_server import RedisServer, free_port  # noqa: E402

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
    print("| operation | local Pool | RedisPool |")
    print("|---|---|---|")
    lj, rj = got["local job"], got["redis job"]
    print(f"| uncontended job, median | {lj['median']:.0f} us | {rj['median']:.0f} us |")
    print(f"| uncontended job, p99 | {lj['p99']:.0f} us | {rj['p99']:.0f} us |")
    print(f"| uncontended jobs/s (sequential) | {lj['per_s']:,.0f} | {rj['per_s']:,.0f} |")
    sh = got["redis shared"]
    label = "a sharer in another process: job end to its answer, median"
    print(f"| {label} | - | {sh['median']:.0f} us |")
    lr, rr = got["local refusals"], got["redis refusals"]
    for name, label in (("busy", "PoolBusy"), ("caller", "CallerBusy")):
        print(
            f"| refusal {label}, median | {lr[name + ' median']:.1f} us "
            f"| {rr[name + ' median']:.0f} us |"
        )
        print(
            f"| refusals {label}/s, 64 concurrent callers | {lr[name + ' per_s']:,.0f} "
            f"| {rr[name + ' per_s']:,.0f} |"
        )


# --- three uvicorn workers, the same burst -------------------------------------------------


def host_children() -> int:
    """Extraction children on the whole host, whatever their parent."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if b"django_pdfpool.sandbox.child_main" in cmdline.read():
                    count += 1
    return count


def burst(url: str, pdfs: list[bytes]) -> tuple[list[int], int, float]:
    import httpx

    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], host_children())
            stop.wait(0.005)

    async def one(i: int, data: bytes) -> int:
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.4.{i + 1}")
        async with httpx.AsyncClient(transport=transport, timeout=120) as client:
            response = await client.post(
                f"{url}/sync/",
                files={"file": ("doc.pdf", data, "application/pdf")},
                headers={"accept": "application/json"},
            )
            return response.status_code

    async def all_at_once() -> list[int]:
        return await asyncio.gather(*(one(i, data) for i, data in enumerate(pdfs)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    statuses = asyncio.run(all_at_once())
    wall = time.perf_counter() - began
    stop.set()
    sampler.join()
    return statuses, peak[0], wall


def serve(
    settings: dict[str, Any], app: str = "tests.project.asgi:application", **env_extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Three uvicorn workers of ``tests.project`` with ``settings`` as PDFPOOL; ``env_extra``
    may set PDFPOOL_TEST_STAGED (FILE_UPLOAD_TEMP_DIR) and PDFPOOL_TEST_WARM
    (``sandbox.configure(warm=...)``): see tests/project/settings.py."""
    import httpx

    port = free_port()
    env = {**os.environ, "PDFPOOL_JSON": json.dumps(settings), "PYTHONPATH": ROOT, **env_extra}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "3", "--no-access-log", "--lifespan", "on"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/plain/", timeout=1).status_code < 500:
                time.sleep(1.0)  # let every worker finish starting
                return process, url
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("uvicorn with three workers did not start")


def side_by_side(redis_url: str, quick: bool) -> None:
    clients = 12
    staged = tempfile.mkdtemp(prefix="pdfpool-bench-")
    base = {"SLOTS": SLOTS, "QUEUE": clients, "WAIT": 60.0}
    wired = {
        **base,
        "REDIS": {"URL": redis_url, "NAMESPACE": f"bench-{uuid4().hex[:8]}", "LEASE": 5.0},
    }
    # uploads staged in a directory of this run's, and cold children (a new interpreter per
    # job): Django's FILE_UPLOAD_TEMP_DIR and sandbox.configure(warm=False), not PDFPOOL keys
    env = {"PDFPOOL_TEST_STAGED": staged, "PDFPOOL_TEST_WARM": "0"}
    print()
    print(f"3 uvicorn workers, SLOTS={SLOTS}, a burst of {clients} distinct ~1 s PDFs:")
    print("| pools | peak extraction children on the host | 200 / 503 / other | wall |")
    print("|---|---|---|---|")
    for label, settings in (("local pools", base), ("Redis pool", wired)):
        process, url = serve(settings, "tests.project.asgi:application", **env)
        try:
            pdfs = [slow_pdf(f"{label}-{i}-{uuid4().hex}") for i in range(clients)]
            statuses, peak, wall = burst(url, pdfs)
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        ok, busy = statuses.count(200), statuses.count(503)
        other = len(statuses) - ok - busy
        print(f"| {label} | {peak} | {ok} / {busy} / {other} | {wall:.1f} s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--no-uvicorn", action="store_true", help="skip the uvicorn part")
    args = parser.parse_args(argv)
    cpus = os.cpu_count()
    print(
        f"machine: Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}, {cpus} CPUs; redis-server on loopback; slots={SLOTS}"
    )
    with RedisServer() as server:
        in_process(server.url, args.quick)
        if not args.no_uvicorn:
            side_by_side(server.url, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
