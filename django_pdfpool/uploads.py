"""Uploads staged for a job: copied once into a file the job owns, hashed on the way, since a
job may outlive the request whose upload it is (docs/usage.md); and the sweep of copies left
by processes that ended (docs/deployment.md)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import tempfile
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.files.uploadedfile import UploadedFile

from .exceptions import UploadTooLarge

if TYPE_CHECKING:
    from _typeshed import SupportsRead

STAGING_CHUNK = 64 * 1024  # bytes read at a time from a raw body or a file being staged


def chunks_of(source: SupportsRead[bytes]) -> Iterator[bytes]:
    """``source``'s bytes (a request's body, an open file) to its end, a chunk at a time."""
    return iter(functools.partial(source.read, STAGING_CHUNK), b"")


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


def stage(upload: UploadedFile[bytes], directory: str | None = None) -> StagedUpload:
    """Copy ``upload`` into a new temporary file, computing its SHA-256 on the way."""
    return stage_chunks(upload.chunks(), upload.name or "upload.pdf", directory)


def stage_chunks(
    chunks: Iterable[bytes],
    name: str = "upload.pdf",
    directory: str | None = None,
    limit: int | None = None,
) -> StagedUpload:
    """Copy ``chunks`` (a raw body's, say) into a new temporary file, hashing them;
    ``UploadTooLarge`` past ``limit`` bytes. A failed read leaves no file behind."""
    digest = hashlib.sha256()
    fd, path = tempfile.mkstemp(prefix=f"pdfpool-{os.getpid()}-", suffix=".pdf", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                if limit is not None and out.tell() + len(chunk) > limit:
                    raise UploadTooLarge.over(limit)
                digest.update(chunk)
                out.write(chunk)
            size = out.tell()
    except BaseException:
        _remove(path)
        raise
    return StagedUpload(path, digest.hexdigest(), size, name, owned=True)


_STAGED = re.compile(r"pdfpool-(?:(\d+)-)?[^/]*\.pdf")  # the pid, where the name has one


def _stale(path: str, pid: str | None, older_than: float | None) -> bool:
    """Named with the pid of a process that ended (on this host: the directory must be its
    own), or without a pid and last written over ``older_than`` seconds ago."""
    try:
        if pid is not None:
            os.kill(int(pid), 0)  # ProcessLookupError once no process has the pid
            return False
        return older_than is not None and time.time() - os.stat(path).st_mtime > older_than
    except ProcessLookupError:
        return True
    except OSError:  # alive but another user's; or the copy is gone already
        return False


def sweep(directory: str | None, older_than: float | None) -> list[str]:
    """Delete (and log) the staged copies in ``directory`` that no live job can own."""
    directory = directory or tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = ((os.path.join(directory, name), _STAGED.fullmatch(name)) for name in names)
    removed = [path for path, match in found if match and _stale(path, match[1], older_than)]
    for path in removed:
        _remove(path)
    if removed:
        logging.getLogger("django_pdfpool").info(
            "removed %d staged upload(s) left by processes that ended", len(removed)
        )
    return removed
