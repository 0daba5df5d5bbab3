"""How late a sleeping thread wakes, in the server process and beside it (issue 24).

A thread that sleeps 1 ms and wakes late waited for a CPU or, in a Python process, for the
GIL. ``BENCH_LAGWATCH=FILE`` in the load benchmark's server (``variants_settings.py``) starts
one such thread there; for each wake-up later than ``SLOW_MS`` it writes a JSON line with
the time, the lateness and every thread's stack as it is when the watcher got the GIL back
(the thread that held it has just let go: its stack is where it was). ``python
benchmarks/lagwatch.py FILE SECONDS`` runs the same watcher as a process of its own, for the
machine's share of the lateness (no GIL shared with anyone).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import traceback
from typing import Any

SLEEP = 0.001
SLOW_MS = 10.0


def watch(path: str, seconds: float | None = None, stacks: bool = True) -> None:
    """Sleep ``SLEEP`` back to back; record each wake-up's lateness (ms) and the slow ones."""
    end = None if seconds is None else time.monotonic() + seconds
    late: list[float] = []
    with open(path, "a", buffering=1) as out:
        while end is None or time.monotonic() < end:
            began = time.perf_counter()
            time.sleep(SLEEP)
            lag = (time.perf_counter() - began - SLEEP) * 1000
            late.append(lag)
            if lag >= SLOW_MS:
                found: dict[str, object] = {"t": time.time(), "lag_ms": round(lag, 2)}
                if stacks:
                    names = {t.ident: t.name for t in threading.enumerate()}
                    found["stacks"] = {
                        names.get(ident, str(ident)): traceback.format_stack(frame)[-6:]
                        for ident, frame in sys._current_frames().items()
                        if ident != threading.get_ident()
                    }
                out.write(json.dumps(found) + "\n")
            if len(late) >= 1000:
                out.write(json.dumps({"t": time.time(), "lags": late}) + "\n")
                late = []
        if late:
            out.write(json.dumps({"t": time.time(), "lags": late}) + "\n")


def start(path: str) -> None:
    """The watcher as a daemon thread of this process."""
    threading.Thread(target=watch, args=(path,), daemon=True, name="bench-lagwatch").start()


STALL_MS = 20.0  # the event loop not back for this long: sample its thread


def watch_loop(loop: asyncio.AbstractEventLoop, path: str) -> None:
    """A heartbeat on ``loop`` every ms and a thread that, while the beat is more than
    ``STALL_MS`` late, samples the loop thread's stack every 5 ms (one JSON line per stall:
    its length and the distinct stacks seen)."""
    beat = [time.perf_counter()]
    loop_thread = threading.get_ident()

    def tick() -> None:
        beat[0] = time.perf_counter()
        loop.call_later(0.001, tick)

    def sampler() -> None:
        with open(path, "a", buffering=1) as out:
            stall: dict[str, Any] | None = None
            while True:
                time.sleep(0.005)
                late = (time.perf_counter() - beat[0]) * 1000
                if late >= STALL_MS:
                    frame = sys._current_frames().get(loop_thread)
                    stack = "".join(traceback.format_stack(frame)[-8:]) if frame else ""
                    if stall is None:
                        stall = {"t": time.time(), "stacks": {}}
                    stall["ms"] = round(late, 1)
                    stall["stacks"][stack] = stall["stacks"].get(stack, 0) + 1
                elif stall is not None:
                    out.write(json.dumps(stall) + "\n")
                    stall = None

    loop.call_soon(tick)
    threading.Thread(target=sampler, daemon=True, name="bench-loopwatch").start()


if __name__ == "__main__":
    watch(sys.argv[1], float(sys.argv[2]), stacks=False)
