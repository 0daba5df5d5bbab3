"""Uploads staged for a job, which may outlive their request: copied once into a file the job
owns, hashed on the way; and the sweep of copies left by processes that ended."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import os
import re
import tempfile
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.files import File

from .exceptions import UploadTooLarge
from .sandbox.extract import no_room

STAGING_CHUNK = 64 * 1024  # bytes read at a time from a raw body (as File.chunks() reads a file)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@dataclass(eq=False)
class StagedUpload:
    """A file for a job. A copy the library made (``owned``) is deleted by ``discard()``,
    or at exit at the latest; a file of yours (``owned=False``, the default) never is."""

    path: str
    sha256: str
    size: int
    name: str
    owned: bool = False

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _remove, self.path) if self.owned else None

    def discard(self) -> None:
        """Delete the copy now if the library made it (idempotent); else do nothing."""
        if self._finalizer is not None:
            self._finalizer()


def stage(
    upload: File[bytes], directory: str | None = None, limit: int | None = None
) -> StagedUpload:
    """``stage_chunks`` of a Django ``File`` (an uploaded file, say: its size checked first),
    which is left at its start, as Django hands it to the view."""
    if limit is not None and upload.size is not None and upload.size > limit:
        raise UploadTooLarge.over(limit)
    name = os.path.basename(upload.name or "upload.pdf")
    staged = stage_chunks(upload.chunks(), name, directory, limit)
    with contextlib.suppress(AttributeError, io.UnsupportedOperation):  # as File.chunks() seeks
        upload.seek(0)
    return staged


def stage_chunks(
    chunks: Iterable[bytes | memoryview], name: str, directory: str | None, limit: int | None = None
) -> StagedUpload:
    """Copy ``chunks`` (a raw body's, say) into a new temporary file, hashing them;
    ``UploadTooLarge`` past ``limit`` bytes, TypeError for text. A failed read leaves no file."""
    digest, path = hashlib.sha256(), ""
    try:
        fd, path = tempfile.mkstemp(
            prefix=_prefix(directory, os.getpid()), suffix=".pdf", dir=directory
        )
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                if isinstance(chunk, str):  # a file read as text, whatever its mode says
                    raise TypeError(f"{name!r} is open in text mode: open it with 'rb'.")
                if limit is not None and out.tell() + len(chunk) > limit:
                    raise UploadTooLarge.over(limit)
                digest.update(chunk)
                out.write(chunk)
            size = out.tell()
    except BaseException as error:
        if path:
            _remove(path)
        if (refusal := no_room(error)) is None:
            raise
        raise refusal from error
    return StagedUpload(path, digest.hexdigest(), size, name, owned=True)


_STAGED = re.compile(r"pdfpool-(?:(\d+)\.(\d+)-)?[^/]*\.pdf")  # the owner: pid.start time


def started(pid: int) -> int | None:
    """When process ``pid`` started (``/proc/<pid>/stat``'s field 22: with the pid, one process
    for good); None if none has it or it exited (a zombie); 0 for a live one without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()  # the name may hold ")" and spaces
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except FileNotFoundError:
        if os.path.isdir("/proc"):
            return None
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # alive, another user's
        pass
    return 0


@functools.cache
def _prefix(directory: str | None, pid: int) -> str:
    """``pdfpool-<pid>.<start time>-``, naming the process a copy belongs to; its first copy in
    ``directory`` sweeps it first (a forked child never ran Django's start-up)."""
    sweep(directory, None)
    return f"pdfpool-{pid}.{started(pid) or 0}-"


def sweep(directory: str | None, older_than: float | None) -> list[str]:
    """Delete (and log) the staged copies in ``directory`` no live job can own: named for a
    process that is gone, or for none and written over ``older_than`` s ago."""
    directory = directory or tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for match in filter(None, map(_STAGED.fullmatch, names)):
        path = os.path.join(directory, match[0])
        try:
            if match[1]:
                stale = started(int(match[1])) != int(match[2])
            else:
                stale = older_than is not None and time.time() - os.stat(path).st_mtime > older_than
            if stale:
                os.unlink(path)
                removed.append(path)
        except OSError:  # gone already, or not ours to remove (a shared /tmp): left
            continue
    if removed:
        logging.getLogger("django_pdfpool").info(
            "removed %d staged upload(s) left by processes that ended", len(removed)
        )
    return removed
