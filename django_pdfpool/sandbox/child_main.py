"""The child process: ``python -m django_pdfpool.sandbox.child_main [--preload E]... [--warm-up]``.

It imports its engines first (a spare does this while nobody waits), says "ready" on stdout,
then blocks on ONE JSON job line on stdin. Only then it limits itself (address space, CPU
time, a wall-clock alarm, no core files) and says "started", reads the PDF from the file
named in the job, extracts, writes one JSON result line on stdout and exits at once. EOF on
stdin (parent gone, spare discarded) ends it quietly. JSON both ways, never pickle: the
parent trusts no byte from here.

Job:    {"path", "engine", "timeout", "memory_limit", "max_pages", "refuse"}
Result: {"ok": true, "sha256", "page_count", "pages", "metadata", "truncated",
         "elapsed", "peak_rss"} or {"ok": false, "code", "detail", "elapsed", "peak_rss"}
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import re
import resource
import signal
import stat
import sys
import time
from typing import Any

from django_pdfpool.sandbox import engines

CPU_MARGIN = 1  # seconds of CPU time granted beyond the job's timeout before SIGXCPU
ALARM_MARGIN = 2  # seconds of wall time beyond the timeout before the child's own SIGALRM
READY = b"ready\n"  # the first line on stdout: imports done, waiting for the job
STARTED = b"started\n"  # the second: the job is read and the limits are set
_SURROGATES = re.compile("[\ud800-\udfff]")


def output_cap(memory_limit: int) -> int:
    """pypdf's decompression caps for a job: a quarter of the memory limit, at most 75 MB."""
    return max(1 << 20, min(memory_limit // 4, 75_000_000))


def limit_self(memory_limit: int, timeout: float) -> None:
    """Address space, CPU seconds from now, a wall-clock alarm, and no core files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _lower(resource.RLIMIT_AS, memory_limit)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + timeout) + CPU_MARGIN
    _lower(resource.RLIMIT_CPU, soft, soft + 1)  # SIGXCPU at soft, SIGKILL at hard
    # If the parent dies mid-job nobody kills this process at the deadline: the alarm does.
    signal.alarm(math.ceil(timeout) + ALARM_MARGIN)


def _lower(kind: int, soft: int, hard: int | None = None) -> None:
    _, current_hard = resource.getrlimit(kind)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def read_document(path: str) -> bytes:
    """The whole file, refusing anything but a regular file (a FIFO or a device would hang:
    O_NONBLOCK keeps even the open() of a FIFO from waiting)."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise engines.Failure("not_a_pdf", "not a regular file")
        return handle.read()


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Read, hash and extract; every ending becomes a JSON-ready dict."""
    try:
        engines.preload(job["engine"])  # at once if preloaded; imported here otherwise
        engines.configure_pypdf(output_cap(int(job["memory_limit"])))
        data = read_document(job["path"])
        # Hashed here, over the very bytes that are parsed: the parent never reads the file.
        digest = hashlib.sha256(data).hexdigest()
        result = engines.run(job["engine"], data, max_pages=job["max_pages"], refuse=job["refuse"])
        result.update(ok=True, sha256=digest)
        return result
    except BaseException as exc:  # every ending is reported, none is raised
        code, detail = engines.classify(exc)
    # Out of the except block: the traceback and the frames holding the document are freed.
    return {"ok": False, "code": code, "detail": detail}


def encode(result: dict[str, Any]) -> bytes:
    """One JSON line; lone surrogates (seen in broken /ToUnicode maps) become U+FFFD."""
    line = json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", line).encode("utf-8")


def peak_rss() -> int:
    """Bytes. VmHWM belongs to this process's own memory; ru_maxrss would also count the
    parent's resident set at spawn time (it survives fork and exec)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError, MemoryError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> None:
    """Start up, wait for the job, do it, report, exit."""
    preload = tuple(argv[i + 1] for i, arg in enumerate(argv) if arg == "--preload")
    for engine in ("pypdf", *preload):
        engines.preload(engine)
    if "--warm-up" in argv:
        engines.warm_up(("pypdf", *preload))
    gc.collect()
    gc.freeze()  # start-up objects are never collected: later collections skip them
    write_all(sys.stdout.fileno(), READY)

    line = sys.stdin.buffer.readline()
    if not line.strip():
        os._exit(0)
    started = time.perf_counter()
    job = json.loads(line)
    limit_self(int(job["memory_limit"]), float(job["timeout"]))
    write_all(sys.stdout.fileno(), STARTED)
    result = run_job(job)
    result["elapsed"] = time.perf_counter() - started
    result["peak_rss"] = peak_rss()
    try:
        data = encode(result)
    except MemoryError:
        del result
        data = encode(
            {
                "ok": False,
                "code": "too_large",
                "detail": "MemoryError",
                "elapsed": time.perf_counter() - started,
                "peak_rss": peak_rss(),
            }
        )
    write_all(sys.stdout.fileno(), data)
    # No interpreter teardown: the parent has its answer, and the memory goes back anyway.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
