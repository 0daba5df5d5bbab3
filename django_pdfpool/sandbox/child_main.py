"""Child side: ``python -P -m django_pdfpool.sandbox.child_main [options]``, one job, then exit.

Imports its engines, says READY, reads one job line, limits itself, says STARTED, answers.
"""

from __future__ import annotations

import gc
import hashlib
import math
import os
import resource
import signal
import stat
import sys
import time

from ..exceptions import ExtractionError
from .engines import (
    classify,
    configure_pypdf,
    decompression_cap,
    extract_pages,
    preload,
    warm_up,
)
from .wire import (
    READY,
    STARTED,
    Answer,
    Extracted,
    Job,
    decode_job,
    encode_answer,
    read_child_options,
)

CPU_MARGIN = 1  # seconds of CPU time granted beyond the job's timeout before SIGXCPU
ALARM_MARGIN = 2  # seconds of wall time beyond the timeout before the child's own SIGALRM


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
    """Set a limit, never above the hard limit this process inherited."""
    _, current_hard = resource.getrlimit(kind)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def read_document(path: str) -> bytes:
    """The whole file, refusing anything but a regular file (a FIFO or a device would hang)."""
    # O_NONBLOCK keeps even the open() of a FIFO from waiting.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ExtractionError("not_a_pdf", detail="not a regular file")
        return handle.read()


def run_job(job: Job) -> Answer:
    """Read, hash and extract the job's file; every ending becomes an answer, none is raised."""
    try:
        preload(job.engine)  # at once if preloaded; imported here otherwise
        configure_pypdf(decompression_cap(job.memory_limit))
        data = read_document(job.path)
        # Hashed here, over the very bytes that are parsed: the parent never reads the file.
        digest = hashlib.sha256(data).hexdigest()
        text = extract_pages(
            job.engine,
            data,
            max_pages=job.max_pages,
            refuse=job.refuse,
            max_text_bytes=job.max_text_bytes,
        )
        return Extracted(sha256=digest, **text)
    except BaseException as exc:
        code, detail = classify(exc)
    # Out of the except block: the traceback and the frames holding the document are freed.
    return ExtractionError(code, detail=detail)


def peak_rss() -> int:
    """Bytes: VmHWM, this process's own peak (ru_maxrss would count the parent's at spawn)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError, MemoryError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data`, however many writes the pipe takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> None:
    """Start up, wait for the job, do it, report, exit."""
    preloaded, warm = read_child_options(argv)
    for engine in ("pypdf", *preloaded):
        preload(engine)
    if warm:
        warm_up(("pypdf", *preloaded))
    gc.collect()
    gc.freeze()  # start-up objects are never collected: later collections skip them
    write_all(sys.stdout.fileno(), READY)

    line = sys.stdin.buffer.readline()
    if not line.strip():  # EOF: the parent is gone or discarded this spare
        os._exit(0)
    started = time.perf_counter()
    job = decode_job(line)
    limit_self(job.memory_limit, job.timeout)
    write_all(sys.stdout.fileno(), STARTED)
    answer = run_job(job)
    answer.elapsed = time.perf_counter() - started
    answer.peak_rss = peak_rss()
    try:
        data = encode_answer(answer)
    except MemoryError:
        del answer
        data = encode_answer(
            ExtractionError(
                "too_large",
                detail="MemoryError",
                elapsed=time.perf_counter() - started,
                peak_rss=peak_rss(),
            )
        )
    write_all(sys.stdout.fileno(), data)
    # No interpreter teardown: the parent has its answer, and the memory goes back anyway.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
