"""Text extraction from untrusted PDFs in a limited child process: the public API.

`extract()` hands one job to a child (a warm spare when one is ready), kills the child's
process group at the deadline, reaps it, and maps every ending to an `Extraction` or an
`ExtractionError` whose message is safe to show a user. Whatever the PDF, the calling
process does not die, bloat or hang. This module knows neither Django nor the pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from ..exceptions import EXTRACTION_MESSAGES, ExtractionError
from .child_process import Child, JobRun, Outcome
from .engines import ENGINES
from .spares import WarmChildren

PAGE_SEPARATOR = "\n\n"  # between pages in Extraction.text
MAX_RESULT_BYTES = 64 << 20  # a child's answer beyond this is refused as too_large


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


_warm = WarmChildren(spares=1)
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
        _warm.resize(spares)
    if tmp_dir is not _UNSET:
        _tmp_dir = None if tmp_dir is None else os.fspath(tmp_dir)
    if python is not None:
        _warm.python = python


def prewarm() -> None:
    """Start the configured spares now instead of on the first extraction."""
    _warm.prewarm()


def shutdown() -> None:
    """End every spare (also done at exit); `configure(spares=n)` starts them again."""
    _warm.shutdown()


def spare_pids() -> list[int]:
    """Process ids of the spares waiting for a job."""
    return _warm.pids()


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
    """Extract the text of `source` (a path the caller keeps, or the file's bytes) in a child
    limited to `memory_limit` bytes of address space and killed after `timeout` seconds.

    Raises ExtractionError for every ending but success; OSError if a path cannot be read;
    ValueError for bad arguments. Works from any event loop in any thread; if cancelled, the
    child is killed and reaped and the temporary file removed before CancelledError goes on.
    """
    _check(timeout, memory_limit, max_pages, engine, on_too_many_pages)
    deadline = time.monotonic() + timeout
    fields = {
        "engine": engine,
        "timeout": timeout,
        "memory_limit": memory_limit,
        "max_pages": max_pages,
        "refuse": on_too_many_pages == "refuse",
    }
    run = JobRun()
    future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
    threading.Thread(
        target=_work,
        args=(future, run, source, fields, deadline, warm),
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
    fields: dict[str, Any],
    deadline: float,
    warm: bool,
) -> None:
    """The worker thread: the job's file, a child, the conversation, the cleanup. The
    temporary copy is gone before the outcome is delivered; the child may still be exiting
    (see JobRun.run), and this thread reaps it afterwards."""
    if not future.set_running_or_notify_cancel():
        return
    path = None
    try:
        path, owned = _job_file(source, fields["memory_limit"])
        job = (json.dumps({**fields, "path": path}) + "\n").encode()
    except BaseException as exc:
        future.set_exception(exc)
        return

    def deliver(outcome: Outcome) -> None:
        if owned:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        future.set_result(outcome)

    engine = fields["engine"]
    max_output = min(MAX_RESULT_BYTES, fields["memory_limit"])
    try:
        if warm:
            run.run(lambda: _warm.take(engine), job, deadline, max_output, deliver, _warm.refill)
        else:
            preload = (engine,) if engine != "pypdf" else ()
            run.run(lambda: Child(_warm.python, preload), job, deadline, max_output, deliver)
    except BaseException as exc:  # a bug, not a PDF: its child is reaped, the copy removed
        if not future.done():
            if owned:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            future.set_exception(exc)


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
    payload = _parse(outcome.output)
    if payload is not None:
        if payload.get("ok") is True:
            extraction = _extraction(payload)
            if extraction is not None:
                return extraction
        elif payload.get("code") in EXTRACTION_MESSAGES:
            elapsed, peak_rss = payload.get("elapsed"), payload.get("peak_rss")
            raise ExtractionError(
                payload["code"],
                detail=str(payload.get("detail", ""))[:200],
                elapsed=float(elapsed) if isinstance(elapsed, (int, float)) else None,
                peak_rss=peak_rss if isinstance(peak_rss, int) else None,
            )
    if outcome.timed_out:
        raise ExtractionError("too_complex", detail="deadline")
    if outcome.overflow:
        raise ExtractionError("too_large", detail="answer larger than allowed")
    returncode = outcome.returncode
    if outcome.lost:
        raise ExtractionError("crashed", detail="no child could take the job")
    if returncode is None or returncode >= 0:
        raise ExtractionError("crashed", detail=f"exit status {returncode}, no valid answer")
    number = -returncode
    name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
    if number in _TIME_SIGNALS:
        raise ExtractionError("too_complex", detail=name)
    if number in _MEMORY_SIGNALS or (engine == "pypdfium2" and number in _PDFIUM_MEMORY_SIGNALS):
        raise ExtractionError("too_large", detail=name)
    raise ExtractionError("crashed", detail=name)


def _parse(output: bytes) -> dict[str, Any] | None:
    """The answer: the last complete line (a cold child's output starts with "ready")."""
    if not output.endswith(b"\n"):
        return None  # cut short: no complete answer
    try:
        payload = json.loads(output[output.rfind(b"\n", 0, -1) + 1 :])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _extraction(payload: dict[str, Any]) -> Extraction | None:
    """The Extraction an answer describes, or None if the answer is not well-formed."""
    pages, metadata = payload.get("pages"), payload.get("metadata")
    valid = (
        isinstance(pages, list)
        and all(isinstance(page, str) for page in pages)
        and isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        and isinstance(payload.get("sha256"), str)
        and isinstance(payload.get("page_count"), int)
        and isinstance(payload.get("truncated"), bool)
        and isinstance(payload.get("elapsed"), (int, float))
        and isinstance(payload.get("peak_rss"), int)
    )
    if not valid:
        return None
    return Extraction(
        sha256=payload["sha256"],
        page_count=payload["page_count"],
        pages=pages,
        metadata=metadata,
        text=PAGE_SEPARATOR.join(pages),
        truncated=payload["truncated"],
        elapsed=float(payload["elapsed"]),
        peak_rss=payload["peak_rss"],
    )
