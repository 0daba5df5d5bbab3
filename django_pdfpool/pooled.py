"""Extraction outside a view (a task, a command, a file in a model's ``FileField``) under
the process's pool, with the limits and the single-flight keys of uploads (docs/usage.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import stat
import threading
from typing import Any, TypeAlias

from asgiref.sync import async_to_sync
from django.core.files import File

from .conf import PoolSettings, get_settings
from .decorators import (
    UploadJob,
    declared_view,
    extract_upload,
    run_from_sync,
    run_staged,
    stage_in_thread,
)
from .exceptions import UploadTooLarge
from .record import PooledView
from .uploads import STAGING_CHUNK, StagedUpload, stage, stage_chunks

Source: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | File[Any]"
"""What ``extract_pooled`` reads: a path, a Django ``File`` or ``FieldFile`` (any storage)
or the PDF's bytes. It is copied for the job; your file is never changed or deleted."""


def extract_pooled(
    source: Source, *, caller: str, job: UploadJob = extract_upload, job_name: str | None = None
) -> Any:
    """Run ``job`` (by default the text extraction) on ``source`` in the process's pool, as
    ``caller``: an upload of the same bytes to a ``@pdf_pooled`` view with the same job
    shares the one run. Raises ``UploadTooLarge``, a ``Refused`` (``PoolBusy``,
    ``CallerBusy``, ``PoolClosed``) or ``ExtractionError``. For synchronous code (a Celery
    task, a command); in async code, ``await aextract_pooled(...)``."""
    view, who = _checked(job, job_name, caller)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("extract_pooled() is for synchronous code: await aextract_pooled().")
    staged = stage_source(source, get_settings())
    waiting: list[asyncio.Task[Any] | None] = []  # its task once it runs; None once it left
    lock = threading.Lock()

    async def run() -> Any:
        with lock:
            left = None in waiting
            waiting.append(asyncio.current_task())
        if left:  # the call ended before this first step: no job for it
            staged.discard()
            raise asyncio.CancelledError
        return await run_staged(staged, who, view)

    signalled = threading.current_thread() is threading.main_thread()  # where signals raise
    try:  # there the pool's code runs on another thread's loop, never where they land
        return async_to_sync(run)() if signalled else run_from_sync(run)
    except BaseException:  # a signal's exception (Ctrl-C, Celery's soft time limit) ended the
        with lock:  # wait: the call leaves its job, as if cancelled
            tasks, waiting[:] = list(waiting), [None]
        for task in filter(None, tasks):  # (or it ended, and its loop closed)
            with contextlib.suppress(RuntimeError):
                task.get_loop().call_soon_threadsafe(task.cancel)
        raise


async def aextract_pooled(
    source: Source, *, caller: str, job: UploadJob = extract_upload, job_name: str | None = None
) -> Any:
    """``extract_pooled`` for async code: the copy is made in a worker thread, and a caller
    cancelled meanwhile leaves no copy behind."""
    view, who = _checked(job, job_name, caller)
    staged = await stage_in_thread(functools.partial(stage_source, source, get_settings()))
    return await run_staged(staged, who, view)


def _checked(job: UploadJob, job_name: str | None, caller: object) -> tuple[PooledView, str]:
    """Both entries' arguments: the job's view, declared, and the caller."""
    if not callable(job):
        raise TypeError(f"job must be an async function taking a StagedUpload, not {job!r}.")
    view = declared_view(job, job_name)
    if not isinstance(caller, str) or not caller:
        raise TypeError(f"caller must be a non-empty string, not {caller!r}.")
    return view, caller


def stage_source(source: Source, conf: PoolSettings) -> StagedUpload:
    """A copy of ``source`` for one job, hashed on the way; ``UploadTooLarge`` past
    ``MAX_UPLOAD_SIZE`` (checked before copying where the size is known)."""
    limit = conf.max_upload_size
    if isinstance(source, bytes | bytearray | memoryview):  # written piece by piece, not copied
        view = memoryview(source)
        octets = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        if limit is not None and octets.nbytes > limit:
            raise UploadTooLarge.over(limit)
        pieces = (octets[at : at + STAGING_CHUNK] for at in range(0, octets.nbytes, STAGING_CHUNK))
        return stage_chunks(pieces, "upload.pdf", conf.temp_dir, limit)
    if isinstance(source, File):  # opened and closed again, or left open at its start
        if not source.name and source.closed:
            raise ValueError("The file has no name and is not open: there is nothing to read.")
        with source.open("rb") if source.closed else contextlib.nullcontext(source) as opened:
            return stage(opened, conf.temp_dir, limit)
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            "extract_pooled reads a path, a django.core.files.File (wrap an open file in "
            f"File(...)) or the PDF's bytes, not {type(source).__name__}."
        )
    path = os.fspath(source)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path!r} is not a regular file.")
    with open(path, "rb") as file:  # staged as a File: its size checked before copying
        return stage_source(File(file, path), conf)
