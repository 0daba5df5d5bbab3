"""Uploads staged for a job: copied once into a file the job owns, hashed on the way,
because a job may outlive the request whose upload it is (docs/usage.md); and the sweep
of copies left by processes that died (docs/deployment.md)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import tempfile
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from django.core.files.uploadedfile import UploadedFile

from .exceptions import UploadTooLarge

STAGING_CHUNK = 64 * 1024  # bytes read at a time from a raw body or a file being staged


class Readable(Protocol):
    """What ``chunks_of`` reads: a request's body, an open file."""

    def read(self, size: int, /) -> bytes: ...


def chunks_of(source: Readable) -> Iterator[bytes]:
    """``source``'s bytes from where it stands to its end, ``STAGING_CHUNK`` at a time."""
    return iter(functools.partial(source.read, STAGING_CHUNK), b"")


def _remove(path: str) -> None:
    """Delete ``path`` if it is still there."""
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
    _finalizer: weakref.finalize[[str], StagedUpload] | None = field(
        init=False, repr=False, default=None
    )

    def __post_init__(self) -> None:
        if self.owned:
            self._finalizer = weakref.finalize(self, _remove, self.path)

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
    ``UploadTooLarge`` once they pass ``limit`` bytes. An error while reading them leaves
    no file behind."""
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


def _gone(pid: int) -> bool:
    """True if no process has this pid (on this host: the directory must be the host's own)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def sweep(directory: str | None, older_than: float | None) -> list[str]:
    """Delete staged copies no live job can own: named with the pid of a process that is
    gone, or (names without a pid) last written over ``older_than`` seconds ago."""
    directory = directory or tempfile.gettempdir()
    removed: list[str] = []
    now = time.time()
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _STAGED.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(directory, name)
        if match[1] is not None:
            stale = int(match[1]) != os.getpid() and _gone(int(match[1]))
        else:
            try:
                age = now - os.stat(path).st_mtime
            except OSError:
                continue
            stale = older_than is not None and age > older_than
        if stale:
            _remove(path)
            removed.append(path)
    return removed
