"""Parent side, the public API: `extract()` runs one job in a child and maps every ending.

Each ending becomes an `Extraction` or an `ExtractionError` safe to show a user.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from ..exceptions import ExtractionError
from .child_process import JobRun, Outcome
from .spares import WarmChildren
from .wire import ENGINES, MAX_ANSWER_BYTES, Extracted, Job, decode_answer, encode_job

PAGE_SEPARATOR = "\n\n"  # between pages in Extraction.text


@dataclass(frozen=True)
class Extraction:
    """What a view gets: the text, page by page, and how much the child spent on it."""

    sha256: str  # of the file's bytes, hashed by the child over exactly what it parsed
    page_count: int  # pages in the document, even when truncated
    pages: list[str]
    metadata: dict[str, str]  # the /Info entries, keys without their leading slash
    text: str  # pages joined with PAGE_SEPARATOR
    truncated: bool  # stopped at max_pages
    elapsed: float  # seconds, measured in the child from job receipt to answer
    peak_rss: int  # bytes, the child's peak resident set


_spares = WarmChildren(spares=1)  # the process's warm spare children
_tmp_dir: str | None = None
_UNSET: Any = object()


def configure(
    *,
    spares: int | None = None,
    tmp_dir: str | os.PathLike[str] | None = _UNSET,
    python: str | None = None,
) -> None:
    """Set the number of warm spares (0 turns them off), the directory for temporary copies
    of byte sources (None: tempfile's default) and the interpreter children run on."""
    global _tmp_dir
    if spares is not None:
        _spares.resize(spares)
    if tmp_dir is not _UNSET:
        _tmp_dir = None if tmp_dir is None else os.fspath(tmp_dir)
    if python is not None:
        _spares.python = python


def prewarm() -> None:
    """Start the configured spares now instead of on the first extraction."""
    _spares.prewarm()


def shutdown() -> None:
    """End every spare (also done at exit); `configure(spares=n)` starts them again."""
    _spares.shutdown()


def spare_pids() -> list[int]:
    """Process ids of the spares waiting for a job."""
    return _spares.pids()


async def extract(
    source: str | os.PathLike[str] | bytes,
    *,
    timeout: float,
    memory_limit: int,
    max_pages: int | None = None,
    engine: str = "pypdf",
    on_too_many_pages: Literal["truncate", "refuse"] = "truncate",
    warm: bool = True,
) -> Extraction:
    """The text of `source` (a path the caller keeps, or bytes), read in a child limited to
    `memory_limit` bytes and `timeout` seconds; every failure raises ExtractionError."""
    _check(timeout, memory_limit, max_pages, engine, on_too_many_pages)
    deadline = time.monotonic() + timeout
    job = Job(
        path="",  # set by the worker thread, once the source is a file
        engine=engine,
        timeout=timeout,
        memory_limit=memory_limit,
        max_pages=max_pages,
        refuse=on_too_many_pages == "refuse",
    )
    run = JobRun()
    future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
    threading.Thread(
        target=_work,
        args=(future, run, source, job, deadline, warm),
        daemon=True,
        name="pdfpool-extract",
    ).start()
    try:
        outcome = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        run.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wrap_future(future)  # the thread reaps and removes the copy
        raise
    return _conclude(outcome, engine)


def _check(
    timeout: float, memory_limit: int, max_pages: int | None, engine: str, on_too_many_pages: str
) -> None:
    """ValueError for a bad argument, ImportError for an engine that is not installed."""
    if not timeout > 0:
        raise ValueError("timeout must be > 0 seconds")
    if not memory_limit > 0:
        raise ValueError("memory_limit must be > 0 bytes")
    if max_pages is not None and max_pages < 1:
        raise ValueError("max_pages must be None or >= 1")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    if on_too_many_pages not in ("truncate", "refuse"):
        raise ValueError("on_too_many_pages must be 'truncate' or 'refuse'")
    if engine == "pypdfium2":
        import importlib.util

        if importlib.util.find_spec("pypdfium2") is None:
            raise ImportError("engine 'pypdfium2' needs django-pdfpool[pdfium]")


def _work(
    future: concurrent.futures.Future[Outcome],
    run: JobRun,
    source: Any,
    job: Job,
    deadline: float,
    warm: bool,
) -> None:
    """The worker thread: the job's file, a child, the conversation; the file it copied is
    removed before the outcome is delivered (the child may still be exiting, then reaped)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        path, owned = _job_file(source, job.memory_limit)
        job_line = encode_job(replace(job, path=path))
    except BaseException as exc:
        future.set_exception(exc)
        return

    def deliver(outcome: Outcome) -> None:
        """Remove the job's own copy, then hand the outcome to the awaiting caller."""
        if owned:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        future.set_result(outcome)

    start = partial(_spares.take if warm else _spares.start_cold, job.engine)
    refill = _spares.refill if warm else _no_refill
    max_output = min(MAX_ANSWER_BYTES, job.memory_limit)
    try:
        run.run(start, job_line, deadline, max_output, deliver, refill)
    except BaseException as exc:  # a bug, not a PDF: its child is reaped, the copy removed
        if not future.done():
            if owned:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            future.set_exception(exc)


def _no_refill() -> None:
    """A cold job's refill: it took no spare, so none is to be replaced."""


def _job_file(source: Any, memory_limit: int) -> tuple[str, bool]:
    """The path the child reads and whether the job owns it (a copy of bytes it removes)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) > memory_limit:
            raise ExtractionError("too_large", detail="file larger than the memory limit")
        descriptor, path = tempfile.mkstemp(prefix="pdfpool-", suffix=".pdf", dir=_tmp_dir)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(source)
        except BaseException:
            os.unlink(path)
            raise
        return path, True
    path = os.path.abspath(os.fspath(source))
    info = os.stat(path)  # FileNotFoundError and friends are the caller's to handle
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("source must be a regular file")
    if info.st_size > memory_limit:
        raise ExtractionError("too_large", detail="file larger than the memory limit")
    return path, False


# Fatal signals: pdfium answers a failed allocation under RLIMIT_AS with a deliberate crash
# (SIGTRAP/SIGILL/SIGSEGV/SIGABRT), CPython with a fatal error (SIGABRT) when it cannot
# recover from MemoryError; a SIGKILL we did not send comes from the kernel's OOM killer.
_TIME_SIGNALS = {signal.SIGXCPU, signal.SIGALRM}
_MEMORY_SIGNALS = {signal.SIGKILL}
_PDFIUM_MEMORY_SIGNALS = {
    signal.SIGSEGV,
    signal.SIGABRT,
    signal.SIGBUS,
    signal.SIGILL,
    signal.SIGTRAP,
}


def _conclude(outcome: Outcome, engine: str) -> Extraction:
    """An Extraction from a child's answer, or the ExtractionError its ending stands for."""
    answer = decode_answer(outcome.output)
    if isinstance(answer, Extracted):
        return _extraction(answer)
    if answer is not None:
        raise answer  # the child's own failure, with its code and figures
    raise _ending_without_answer(outcome, engine)


def _extraction(answer: Extracted) -> Extraction:
    """The public result for a child's answer: its fields and the pages' joined text."""
    return Extraction(
        sha256=answer.sha256,
        page_count=answer.page_count,
        pages=answer.pages,
        metadata=answer.metadata,
        text=PAGE_SEPARATOR.join(answer.pages),
        truncated=answer.truncated,
        elapsed=answer.elapsed,
        peak_rss=answer.peak_rss,
    )


def _ending_without_answer(outcome: Outcome, engine: str) -> ExtractionError:
    """The error for a child that gave no valid answer: the deadline, overflow, or its death."""
    if outcome.timed_out:
        return ExtractionError("too_complex", detail="deadline")
    if outcome.overflow:
        return ExtractionError("too_large", detail="answer larger than allowed")
    returncode = outcome.returncode
    if outcome.lost:
        return ExtractionError("crashed", detail="no child could take the job")
    if returncode is None or returncode >= 0:
        return ExtractionError("crashed", detail=f"exit status {returncode}, no valid answer")
    number = -returncode
    name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
    if number in _TIME_SIGNALS:
        return ExtractionError("too_complex", detail=name)
    if number in _MEMORY_SIGNALS or (engine == "pypdfium2" and number in _PDFIUM_MEMORY_SIGNALS):
        return ExtractionError("too_large", detail=name)
    return ExtractionError("crashed", detail=name)
