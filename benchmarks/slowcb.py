"""The event loop's slow callbacks, timed (issue 24): ``BENCH_SLOW_CALLBACKS=FILE`` in the
load benchmark's server. asyncio's debug mode logs a callback over ``slow_callback_duration``
with its wall time only; this writes, for each callback of the main thread's loop over
``SLOW_MS``, its wall time, the CPU time its thread used, the time the thread waited
runnable for a CPU (``/proc/self/task/TID/schedstat``) and samples of its stack; and every
cyclic garbage collection over 1 ms, in any thread, with its generation and object count.
One JSON object a line; docs/performance.md reads them."""

from __future__ import annotations

import asyncio.events
import collections
import gc
import json
import threading
import time
import traceback
from typing import Any, TextIO

SLOW_MS = 1.0  # a callback at least this long is written
GC_MS = 1.0  # a collection at least this long is written
SAMPLE_EVERY = 0.002  # seconds between two samples of a slow callback's stack


def install(path: str) -> None:
    """Time every ``Handle._run`` of this process and every collection, from now on."""
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open as long as the process)
    watch = _Watch(out)
    threading.Thread(target=watch.sample, daemon=True, name="bench-slowcb").start()
    gc.callbacks.append(watch.collected)
    run = asyncio.events.Handle._run

    def timed(self: asyncio.events.Handle) -> None:
        if threading.current_thread() is not threading.main_thread():
            run(self)
            return
        with watch.callback(self):
            run(self)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


def _runnable_ns(stat: TextIO) -> int:
    """Nanoseconds this thread has waited runnable, from its open schedstat file."""
    stat.seek(0)
    return int(stat.read().split()[1])


class _Watch:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.began: float | None = None  # perf_counter at the running slow callback's start
        self.loop_thread: int | None = None
        self.samples: collections.Counter[str] = collections.Counter()
        self.gc_began = 0.0
        self.stat: TextIO | None = None  # the loop thread's schedstat, opened once

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps({"t": time.time(), **record}) + "\n")

    def callback(self, handle: asyncio.events.Handle) -> _Timed:
        return _Timed(self, handle)

    def sample(self) -> None:
        """Every SAMPLE_EVERY: the loop thread's stack, while a callback has run 3 ms."""
        import sys

        while True:
            time.sleep(SAMPLE_EVERY)
            began, thread = self.began, self.loop_thread
            if began is None or thread is None or time.perf_counter() - began < 0.003:
                continue
            frame = sys._current_frames().get(thread)
            if frame is not None and self.began == began:
                stack = reversed(traceback.extract_stack(frame)[-14:])
                where = (f"{f.name}({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in stack)
                self.samples[" <- ".join(where)] += 1

    def collected(self, phase: str, info: dict[str, int]) -> None:
        """gc.callbacks: a collection over GC_MS, with the objects left in its generation."""
        if phase == "start":
            self.gc_began = time.perf_counter()
            return
        took = (time.perf_counter() - self.gc_began) * 1000
        if took >= GC_MS:
            self.write(
                {
                    "gc_ms": round(took, 2),
                    **info,
                    "thread": threading.current_thread().name,
                    "objects": len(gc.get_objects(info["generation"])),
                }
            )


class _Timed:
    """One callback of the loop thread: written if it took SLOW_MS or more."""

    def __init__(self, watch: _Watch, handle: asyncio.events.Handle) -> None:
        self.watch, self.handle = watch, handle

    def __enter__(self) -> None:
        watch = self.watch
        watch.loop_thread = threading.get_ident()
        watch.samples.clear()
        if watch.stat is None:
            watch.stat = open(f"/proc/self/task/{threading.get_native_id()}/schedstat")
        self.stat = watch.stat
        self.runnable = _runnable_ns(self.stat)
        self.cpu = time.thread_time()
        watch.began = self.began = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        watch = self.watch
        watch.began = None
        took = (time.perf_counter() - self.began) * 1000
        if took >= SLOW_MS:
            callback = getattr(self.handle, "_callback", None)
            coro = getattr(getattr(callback, "__self__", None), "get_coro", lambda: None)()
            frame = getattr(coro, "cr_frame", None)
            watch.write(
                {
                    "ms": round(took, 2),
                    "cpu_ms": round((time.thread_time() - self.cpu) * 1000, 2),
                    "runq_ms": round((_runnable_ns(self.stat) - self.runnable) / 1e6, 2),
                    "cb": repr(callback)[:200],
                    "where": "".join(traceback.format_stack(frame, 3)) if frame else "",
                    "samples": dict(watch.samples),
                }
            )


def summary(path: str) -> dict[str, Any]:
    """What a FILE of install() adds up to: slow callbacks' wall, CPU and runnable-wait
    milliseconds; collections over GC_MS by generation (main thread / others)."""
    callbacks = {"count": 0, "ms": 0.0, "cpu_ms": 0.0, "runq_ms": 0.0, "max_ms": 0.0}
    collections_: dict[str, list[float]] = collections.defaultdict(list)
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if "gc_ms" in record:
                where = "main" if record["thread"] == "MainThread" else "other"
                collections_[f"gen{record['generation']} {where}"].append(record["gc_ms"])
                continue
            callbacks["count"] += 1
            callbacks["max_ms"] = max(callbacks["max_ms"], record["ms"])
            for key in ("ms", "cpu_ms", "runq_ms"):
                callbacks[key] += record[key]
    pauses = {
        key: {"count": len(ms), "total_ms": round(sum(ms), 1), "max_ms": max(ms)}
        for key, ms in sorted(collections_.items())
    }
    return {"slow callbacks": {k: round(v, 1) for k, v in callbacks.items()}, "gc": pauses}


if __name__ == "__main__":
    import sys

    print(json.dumps(summary(sys.argv[1]), indent=1))
