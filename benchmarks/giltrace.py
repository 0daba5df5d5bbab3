"""Who holds the GIL, and who waits for it, in a running CPython process (issue 24).

``python benchmarks/giltrace.py PID [--seconds 12]`` (root, Linux ``perf``, CPython 3.11's
``take_gil``/``drop_gil`` in its symbol table) puts uprobes on the process's interpreter,
records every GIL hand-over for the given seconds, and prints per thread how long it held
the GIL and waited for it, with the longest waits and who held the GIL during each. A wait
the holder crossed in many short holds is the convoy of CPython's GIL (bpo-7946): a thread
that drops the GIL for a quick system call takes it back before a woken waiter runs, and
the waiter's 5 ms timeout restarts on every switch. Thread names come from ``py-spy dump``.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the uprobes: name -> where, in perf probe's syntax (perf adds "__return" to a return's name)
EVENTS = {"take_gil": "take_gil", "taken": "take_gil%return", "drop_gil": "drop_gil"}
LONG_MS = 2.0  # a hold or a wait at least this long is counted as long


@dataclass(frozen=True)
class Span:
    """One interval of one thread: holding the GIL, or waiting in take_gil."""

    start: float  # seconds, CLOCK_MONOTONIC
    end: float
    tid: int

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1000


def interpreter(pid: int) -> str:
    """The file holding the process's ``take_gil``: libpython if loaded, else the executable."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1]
        if re.search(r"/libpython3\.\d+[^/]*\.so", path):
            return path
    return str(Path(f"/proc/{pid}/exe").resolve())


def thread_names(pid: int) -> dict[int, str]:
    """Python's names for the process's threads, from ``py-spy dump`` ({} without py-spy)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        dump = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--nonblocking"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(t): n for t, n in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', dump, re.M)}


def record(pid: int, seconds: float, out: Path) -> str:
    """Add the uprobes, record ``seconds`` of the process, remove them; perf script's text."""
    binary = interpreter(pid)
    group = "pdfpool_gil"
    subprocess.run(["perf", "probe", "-q", "-d", f"{group}:*"], capture_output=True)
    try:
        for name, where in EVENTS.items():
            subprocess.run(  # -f: beside any probe already at the same place
                ["perf", "probe", "-q", "-f", "-x", binary, f"{group}:{name}={where}"],
                check=True,
                capture_output=True,
            )
        events = ["-e", f"{group}:*", "-p", str(pid), "--", "sleep", str(seconds)]
        clock = ["-k", "CLOCK_MONOTONIC", "-m", "4096"]
        subprocess.run(
            ["perf", "record", "-q", *clock, "-o", str(out), *events],
            check=True,
            capture_output=True,
        )
        return subprocess.run(
            ["perf", "script", "-i", str(out), "-F", "tid,time,event"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run(["perf", "probe", "-q", "-d", f"{group}:*"], capture_output=True)


def spans(script: str) -> tuple[list[Span], list[Span]]:
    """(holds, waits) from perf script's lines: a hold runs from take_gil's return to the
    thread's next drop_gil, a wait from take_gil's entry to its return."""
    state: dict[int, tuple[str, float]] = {}
    holds: list[Span] = []
    waits: list[Span] = []
    for line in script.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        tid, at = int(fields[0]), float(fields[1].rstrip(":"))
        event = fields[2].rstrip(":").split(":")[-1]
        was = state.get(tid)
        if event == "take_gil":
            state[tid] = ("wait", at)
        elif event == "taken__return":
            if was and was[0] == "wait":
                waits.append(Span(was[1], at, tid))
            state[tid] = ("hold", at)
        elif event == "drop_gil":
            if was and was[0] == "hold":
                holds.append(Span(was[1], at, tid))
            state[tid] = ("free", at)
    return holds, waits


def summary(
    holds: list[Span], waits: list[Span], names: dict[int, str], top: int
) -> dict[str, Any]:
    """Per thread: GIL held and waited (ms, times), holds and waits over LONG_MS, the
    longest of each; then the ``top`` longest waits, each with the threads that held the
    GIL in it and the time nobody did."""
    if not holds:
        return {"error": "no GIL hand-over recorded"}
    span = max(h.end for h in holds) - min(h.start for h in holds)
    threads: dict[int, dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float)
    )
    for kind, items in (("held", holds), ("waited", waits)):
        for s in items:
            row = threads[s.tid]
            row[f"{kind}_ms"] += s.ms
            row[f"{kind}_times"] += 1
            row[f"{kind}_over_{LONG_MS:g}ms"] += s.ms >= LONG_MS
            row[f"longest_{kind}_ms"] = max(row[f"longest_{kind}_ms"], s.ms)
    by_start = sorted(holds, key=lambda s: s.start)
    starts = [s.start for s in by_start]
    longest = []
    for wait in sorted(waits, key=lambda s: -s.ms)[:top]:
        held: dict[int, float] = collections.defaultdict(float)  # ms per holder
        count: collections.Counter[int] = collections.Counter()
        i = bisect.bisect_left(starts, wait.start - 1.0)
        while i < len(by_start) and by_start[i].start < wait.end:
            hold = by_start[i]
            overlap = min(hold.end, wait.end) - max(hold.start, wait.start)
            if overlap > 0:
                held[hold.tid] += overlap * 1000
                count[hold.tid] += 1
            i += 1
        longest.append(
            {
                "ms": round(wait.ms, 1),
                "thread": names.get(wait.tid, str(wait.tid)),
                # nobody held the GIL: the waiter was not yet running (runnable, or not woken)
                "free_ms": round(wait.ms - sum(held.values()), 1),
                "held_by": [
                    {"thread": names.get(t, str(t)), "ms": round(ms, 1), "holds": count[t]}
                    for t, ms in sorted(held.items(), key=lambda item: -item[1])[:3]
                ],
            }
        )
    return {
        "seconds": round(span, 2),
        "hand_overs": len(holds),
        "threads": sorted(
            (
                {"thread": names.get(tid, str(tid)), "tid": tid}
                | {k: round(v, 1) for k, v in row.items()}
                for tid, row in threads.items()
            ),
            key=lambda r: -r.get("held_ms", 0),
        ),
        "longest_waits": longest,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--top", type=int, default=10, help="the longest waits to show (10)")
    parser.add_argument("--threads", type=int, default=12, help="threads to show (12)")
    args = parser.parse_args(argv)
    if not shutil.which("perf"):
        sys.exit("giltrace needs Linux perf (linux-perf) and root")
    names = thread_names(args.pid)
    with tempfile.TemporaryDirectory() as folder:
        script = record(args.pid, args.seconds, Path(folder) / "gil.data")
    names |= thread_names(args.pid)
    result = summary(*spans(script), names, args.top)
    if "threads" in result:
        result["threads"] = result["threads"][: args.threads]
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
