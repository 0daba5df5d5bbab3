"""Uploads staged for a job: copied once into a file the job owns, hashed on the way,
because a job may outlive the request whose upload it is (docs/usage.md)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import weakref
from dataclasses import dataclass, field

from django.core.files.uploadedfile import UploadedFile


def _remove(path: str) -> None:
    """Delete ``path`` if it is still there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@dataclass(eq=False)
class StagedUpload:
    """A job's own copy of an upload; deleted by ``discard()``, or at exit at the latest."""

    path: str
    sha256: str
    size: int
    name: str
    _finalizer: weakref.finalize = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _remove, self.path)

    def discard(self) -> None:
        """Delete the copy now (idempotent)."""
        self._finalizer()


def stage(upload: UploadedFile, directory: str | None = None) -> StagedUpload:
    """Copy ``upload`` into a new temporary file, computing its SHA-256 on the way."""
    digest = hashlib.sha256()
    fd, path = tempfile.mkstemp(prefix="pdfpool-", suffix=".pdf", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in upload.chunks():
                digest.update(chunk)
                out.write(chunk)
            size = out.tell()
    except BaseException:
        _remove(path)
        raise
    return StagedUpload(path, digest.hexdigest(), size, upload.name or "upload.pdf")
