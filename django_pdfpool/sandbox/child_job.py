"""Child side: one job read from a pipe, limited, done and answered, then the process exits:
the path of a cold child and of a child forked from the template alike."""

from __future__ import annotations

import hashlib
import math
import os
import resource
import signal
import stat
import time
from typing import Any, NoReturn

from ..exceptions import ExtractionError
from .confine import confine_job, libc, prepare_job, status_fd
from .engines import (
    WARM_UP_PDF,
    classify,
    configure_pypdf,
    decompression_cap,
    encrypted_warm_ups,
    extract_pages,
    preload,
)
from .wire import (
    STARTED,
    ChildAnswer,
    Extracted,
    ExtractionJob,
    decode_job,
    encode_answer,
    encode_job,
)

CPU_MARGIN = 1  # seconds of CPU time granted beyond the job's timeout before SIGXCPU
ALARM_MARGIN = 2  # seconds of wall time beyond the timeout before the child's own SIGALRM
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent (thread) dies
PR_SET_NAME = 15  # prctl(2): this process's name (comm)
JOB_NAME = b"pdfpool-job"  # a ready child's name once its job line is read
REHEARSAL_TIMEOUT, REHEARSAL_MEMORY = 60.0, 1 << 30  # a rehearsal's job (no limits are set)


def die_with_parent(parent: int, signum: int) -> None:
    """`signum` when the thread that started this process dies; exit now if it is gone."""
    _prctl(PR_SET_PDEATHSIG, signum)  # not Linux: the parent's pipes still end the process
    if os.getppid() != parent:
        os._exit(0)


def set_name(name: bytes) -> None:
    """This process's name in /proc/PID/comm and ps (15 bytes at most)."""
    _prctl(PR_SET_NAME, name[:15])


def _prctl(option: int, value: Any) -> None:
    """prctl(2), where there is one (libc's, looked up once: a fork inherits it)."""
    prctl = getattr(libc(), "prctl", None)
    if prctl is not None:
        prctl(option, value, 0, 0, 0)


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


def extract_job(job: ExtractionJob, data: bytes | None = None) -> ChildAnswer:
    """Read (unless given), hash and extract the job's file; every ending is an answer."""
    try:
        if job.engine != "pypdf":  # pypdf's own setup is configure_pypdf's, just below
            preload(job.engine)  # at once if preloaded; imported here otherwise
        configure_pypdf(decompression_cap(job.memory_limit))
        if data is None:
            data = read_document(job.path)
        # Hashed here, over the very bytes that are parsed: the parent never reads the file.
        digest = hashlib.sha256(data).hexdigest()
        max_pages, refuse, cap = job.max_pages, job.refuse, job.max_text_bytes
        text = extract_pages(
            job.engine, data, max_pages=max_pages, refuse=refuse, max_text_bytes=cap
        )
        return Extracted(sha256=digest, **text)
    except BaseException as exc:
        code, detail = classify(exc)
    # Out of the except block: the traceback and the frames holding the document are freed.
    return ExtractionError(code, detail=detail)


def rehearse(engines: tuple[str, ...], encrypted: bool = False) -> None:
    """A job's whole path on the warm-up document with each engine (also encrypted, for the
    template), no limits set: imports, caches and copy-on-write faults paid before a job."""
    locked = encrypted_warm_ups() if encrypted else []
    for engine in engines:
        job = ExtractionJob("", engine, REHEARSAL_TIMEOUT, REHEARSAL_MEMORY, None, False)
        for document in [WARM_UP_PDF, *(locked if engine == "pypdf" else ())]:
            encode_answer(extract_job(decode_job(encode_job(job)), document))


def peak_rss() -> int:
    """VmHWM in bytes (ru_maxrss counts the parent's), by the fd opened before the sandbox."""
    try:
        fd = status_fd()
        if fd is not None:
            status = os.pread(fd, 1 << 14, 0)
        else:
            with open("/proc/self/status", "rb") as file:
                status = file.read()
        for line in status.splitlines():
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


def read_line(fd: int) -> bytes:
    """Bytes up to and including the first newline, or all there was before EOF."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        line += chunk
    return line


def serve_job(stdin: int = 0, stdout: int = 1, renamed: bool = False) -> NoReturn:
    """Wait for the job line, limit this process, say STARTED, answer, exit (no teardown);
    a ready child (`renamed` while it waits) takes JOB_NAME with its job."""
    prepare_job()  # the job's sandbox, but for its file: a ready child builds it while it waits
    line = read_line(stdin)
    if not line.strip():  # EOF: the parent is gone or discarded this child
        os._exit(0)
    if renamed:
        set_name(JOB_NAME)
    started = time.perf_counter()
    job = decode_job(line)
    try:
        confine_job(job.path)  # before a byte of the PDF is read
        refused = None
    except OSError:  # a required layer could not be had: the PDF is not read
        refused = ExtractionError("crashed", detail="sandbox layer unavailable")
    limit_self(job.memory_limit, job.timeout)
    write_all(stdout, STARTED)
    answer = extract_job(job) if refused is None else refused
    answer.elapsed = time.perf_counter() - started
    answer.peak_rss = peak_rss()
    try:
        data = encode_answer(answer)
    except MemoryError:
        del answer
        elapsed = time.perf_counter() - started
        error = ExtractionError(
            "too_large", detail="MemoryError", elapsed=elapsed, peak_rss=peak_rss()
        )
        data = encode_answer(error)
    write_all(stdout, data)
    # No interpreter teardown: the parent has its answer, and the memory goes back anyway.
    os._exit(0)
