"""What the extraction tests look at in /proc: this process's children, their memory, limits."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from django_pdfpool import extraction

CHILD_MARK = b"django_pdfpool.sandbox.child_main"


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def child_pids() -> set[int]:
    """Extraction children of this process: alive (by their command line) or zombies."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2 or int(fields[1]) != me:
            continue
        if fields[0] == b"Z" or CHILD_MARK in _read(f"/proc/{entry}/cmdline"):
            found.add(int(entry))
    return found


def leftovers(before: set[int], timeout: float = 2.0) -> set[int]:
    """Children that are neither old nor waiting spares, once exiting ones had `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        extra = child_pids() - before - set(extraction.spare_pids())
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.01)


def status_kb(pid: int, field: bytes) -> int | None:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith(field + b":"):
            return int(line.split()[1])
    return None


class PeakWatcher:
    """Samples the VmPeak (kernel-kept peak address space) of every extraction child."""

    def __init__(self, interval: float = 0.005) -> None:
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(interval,), daemon=True)

    def _watch(self, interval: float) -> None:
        while not self._stop.is_set():
            for pid in child_pids():
                peak = status_kb(pid, b"VmPeak")
                if peak is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), peak * 1024)
            time.sleep(interval)

    def __enter__(self) -> PeakWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int:
        return max(self.peaks.values(), default=0)


def rlimits(pid: int) -> dict[str, str]:
    """/proc/PID/limits as {"Max address space": "268435456", ...} (soft limits)."""
    limits = {}
    for line in _read(f"/proc/{pid}/limits").decode().splitlines()[1:]:
        name, soft = line[:26].strip(), line[26:47].strip()
        limits[name] = soft
    return limits
