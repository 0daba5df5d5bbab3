"""A forked job's fixed cost in the parent: the kept worker threads against a thread per job.

``python benchmarks/bench_job_cost.py [ROUNDS]`` (100) runs the built-in one-page document
(about 1 ms of the child's own work) through a ready child, the two ways alternating job by
job, each after a ready child is waiting: what is left is the parent's fixed cost per job
(issue 24). Prints the medians and quartiles, with the load average before and after.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from django_pdfpool import extract
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox.child_process import start_thread
from django_pdfpool.sandbox.engines import WARM_UP_PDF

LIMITS = {"timeout": 30.0, "memory_limit": 1 << 30}


def fresh(work: Any, future: Any) -> None:
    """A job's worker thread as before: a new one per job, started by the starter."""
    start_thread(threading.Thread(target=work, daemon=True, name="pdfpool-extract"), future)


async def ready_child() -> None:
    """Until a ready child waits for its job (one more job has the template make one)."""
    if len(sandbox.idle_pids()) < 2:
        await extract(WARM_UP_PDF, **LIMITS)
    while len(sandbox.idle_pids()) < 2:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.02)


async def main(rounds: int) -> dict[str, list[float]]:
    kept = sandbox._workers.run
    times: dict[str, list[float]] = {"kept worker threads": [], "a thread per job": []}
    for _ in range(2):
        await extract(WARM_UP_PDF, **LIMITS)
        await asyncio.sleep(0.5)
    try:
        for _ in range(rounds):
            for mode, found in times.items():
                sandbox._workers.run = kept if mode.startswith("kept") else fresh  # type: ignore[method-assign]
                await ready_child()
                start = time.perf_counter()
                await extract(WARM_UP_PDF, **LIMITS)
                found.append((time.perf_counter() - start) * 1000)
    finally:
        sandbox._workers.run = kept  # type: ignore[method-assign]
    return times


if __name__ == "__main__":
    before = os.getloadavg()[0]
    found = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
    for mode, values in found.items():
        q = statistics.quantiles(values, n=4)
        print(
            f"{mode}: median {statistics.median(values):.2f} ms, quartiles {q[0]:.2f}-{q[2]:.2f} ms"
        )
    print(
        f"{len(values)} jobs each; load average {before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
