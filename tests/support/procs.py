"""What the extraction tests look at in /proc: this process's children, their memory, limits."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool.sandbox.wire import READY, STARTED

CHILD_MARK = b"django_pdfpool.sandbox.child_main"
READY_NAME = "pdfpool-ready"  # a template's child forked ahead, waiting for its job (comm)


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def child_pids() -> set[int]:
    """Extraction processes of this process, alive (by their command line) or zombies: its
    children, and theirs (a template's forked children)."""
    me, parents, marked = os.getpid(), {}, set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2:
            continue
        parents[int(entry)] = int(fields[1])
        if fields[0] == b"Z" or CHILD_MARK in _read(f"/proc/{entry}/cmdline"):
            marked.add(int(entry))
    mine = {pid for pid in marked if parents[pid] == me}
    return mine | {pid for pid in marked if parents[pid] in mine}


def name(pid: int) -> str:
    """The process's name (/proc/PID/comm), "" if it is gone."""
    return _read(f"/proc/{pid}/comm").decode().strip()


def _starting_templates(pids: set[int]) -> set[int]:
    """Those of ``pids`` this process started as a template (a job may start one while it
    runs cold; ``idle_pids`` names it once it is ready). Its forked children are not these."""
    me = str(os.getpid()).encode()
    return {
        pid
        for pid in pids
        if _read(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()[1:2] == [me]
        and b"--template" in _read(f"/proc/{pid}/cmdline").split(b"\0")
    }


def leftovers(before: set[int], timeout: float = 2.0) -> set[int]:
    """Extraction processes that are neither old nor the template, once exiting ones had
    `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        extra = child_pids() - before - set(extraction.idle_pids())
        extra -= _starting_templates(extra)
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.01)


def status_kb(pid: int, field: bytes) -> int | None:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith(field + b":"):
            return int(line.split()[1])
    return None


class PeakWatcher:
    """Samples the VmPeak (kernel-kept peak address space) of every extraction child. With
    ``limit``, of the children there ``before`` only those holding that address-space limit
    (one that takes this job): not another test's spare, prepared with other limits."""

    def __init__(
        self,
        interval: float = 0.005,
        limit: int | None = None,
        before: frozenset[int] = frozenset(),
    ) -> None:
        self.peaks: dict[int, int] = {}
        self._limit, self._before = limit, before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(interval,), daemon=True)

    def _watch(self, interval: float) -> None:
        while not self._stop.is_set():
            for pid in child_pids():
                if pid in self._before and not self._holds_limit(pid):
                    continue
                peak = status_kb(pid, b"VmPeak")
                if peak is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), peak * 1024)
            time.sleep(interval)

    def _holds_limit(self, pid: int) -> bool:
        try:
            return rlimits(pid).get("Max address space") == str(self._limit)
        except OSError:
            return False

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


def job_child(candidates: Iterable[int], memory: int) -> int | None:
    """The child among ``candidates`` with its job's limits set: its address space
    ``memory`` and a CPU limit, the last one it sets (after reading its job, just before it
    says STARTED); None if there is none yet. A ready child has no limits."""
    for pid in sorted(candidates):
        limits = rlimits(pid)  # {} if gone meanwhile
        if (
            limits.get("Max address space") == str(memory)
            and limits.get("Max cpu time", "unlimited") != "unlimited"
        ):
            return pid
    return None


def cpu_time(pid: int) -> float | None:
    """Seconds of CPU the process has used (user and system); None if it is gone."""
    stat = _stat(pid)
    if not stat:
        return None
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def extraction_children(pid: int) -> list[psutil.Process]:
    """The extraction children (by their command line) under process ``pid``."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if CHILD_MARK.decode() in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


PF_EXITING = 0x4  # the kernel's flag of a process in exit(): /proc/PID/stat, field 9


def _stat(pid: int) -> list[bytes]:
    """/proc/PID/stat from field 3 (state) on; empty if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def _wchar(pid: int) -> int | None:
    """Bytes the process has written so far, to anything (/proc/PID/io); None if unreadable."""
    try:
        with open(f"/proc/{pid}/io", "rb") as file:
            for line in file:
                if line.startswith(b"wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def seccomp_filters(pid: int) -> int | None:
    """Seccomp filters on the process (/proc/PID/status, readable by anyone); None if gone."""
    found = status_kb(pid, b"Seccomp_filters")  # a count, not kB: the same line format
    return found


class Sampler:
    """Counts the server's extraction children every few milliseconds, in a thread.

    ``peak`` counts the children at work, i.e. not yet answered: a child writes its answer
    and exits at once, and the pool frees the slot as soon as the answer is read, before
    the child is gone, so on a busy CPU the next job's child may start while an answered
    one is still on its way out (seen: SLOTS + 1 processes for a few ms). A child counts as
    answered once it is exiting (PF_EXITING) or has written (/proc/PID/io's wchar) more
    than "started" beyond what it wrote before its job: a forked child's counters start at
    zero with its fork; a cold child writes "ready" and, sandboxed, its seccomp program
    through a pipe (~200 bytes) at start-up, so its count is taken once its job filter is
    on (the last thing before its job line; /proc/PID/status's Seccomp_filters). Whatever
    the sampler cannot read or saw too late counts as at work: it makes the peak higher,
    never lower. Its stderr is /dev/null, and these documents make pypdf write nothing
    there. Idle processes (the template, a cold spare) have not answered: they count.
    ``peak_all`` counts every extraction process; ``pids`` holds every one seen at work.
    A template's ready children (forked ahead, named READY_NAME until their job line
    arrives) are idle, not at work: counted in ``peak_all`` only.
    A look at every child takes a while (tens of ms on a loaded machine, this thread waiting
    for the GIL): meanwhile a job's child may answer and be reaped and the next job's ready
    child, listed already, take its job. So a child counts if it is at work at two looks,
    the second after every first: those counted were all at work at once, between the two.
    """

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.peak_all, self.pids = pid, 0, 0, set()
        self._inherited = seccomp_filters(pid) or 0  # the server's own filters
        self._before_job: dict[int, int | None] = {}  # pid -> bytes written before its job
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _at_work(self, pid: int) -> bool:
        """Read before the process can be reaped: filters, then stat, then io."""
        filters = seccomp_filters(pid)
        fields = _stat(pid)
        if filters is None or not fields or fields[0] == b"Z" or int(fields[6]) & PF_EXITING:
            return False
        written = _wchar(pid)
        if pid not in self._before_job:
            if int(fields[1]) != self.pid:  # a template's child: counted from its fork
                self._before_job[pid] = 0
            elif filters >= self._inherited + 2:  # its job's filter is on: counted from here
                self._before_job[pid] = written
            elif filters > self._inherited:  # sandboxed, starting up: not answered
                return True
        # no seccomp layer (yet: a sandboxed child before its layers has written nothing)
        before = self._before_job.get(pid, len(READY))
        if written is None or before is None:
            return True
        return written <= before + len(STARTED)

    def _sample(self) -> None:
        while not self._stop.is_set():
            children = extraction_children(self.pid)
            seen = {child.pid for child in children if name(child.pid) != READY_NAME}
            first = {pid for pid in seen if self._at_work(pid)}
            # looked at again once every first look is done: see the class docstring
            working = sum(name(pid) != READY_NAME and self._at_work(pid) for pid in first)
            self.peak = max(self.peak, working)
            self.peak_all = max(self.peak_all, len(children))
            self.pids.update(seen)
            self._stop.wait(0.003)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
