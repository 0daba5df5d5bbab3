"""``pdfpool extract``: one PDF through the sandbox under the settings' limits, with progress
lines for large files, and its outcome as text (docs/command.md)."""

from __future__ import annotations

import asyncio
import os
import stat
import time
import unicodedata
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError

from ..conf import PoolSettings
from ..exceptions import ExtractionError, Wording
from ..sandbox.extract import Extraction, extract
from ..status.page import fmt

PROGRESS_BYTES = 1 << 20  # files at least this large get progress lines on stderr
PROGRESS_EVERY = 1.0  # seconds between progress lines
PREVIEW_CHARS = 600  # of the text, shown without --text
LIMITS = ("timeout", "memory_limit", "max_pages", "max_text_bytes")  # the settings extract() takes
ERROR_FIELDS = ("code", "message", "detail", "elapsed", "peak_rss")  # of ExtractionError, as JSON

# Bidirectional overrides and isolates: they reorder what a terminal shows (CVE-2021-42574)
_BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F))}
_BIDI |= set(map(chr, range(0x2066, 0x206A)))


def safe(text: str, *, keep: str = "") -> str:
    """``text`` with control characters (but those in ``keep``) and bidirectional controls
    escaped: what a hostile PDF says must not drive the operator's terminal."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if ch not in keep and (unicodedata.category(ch) == "Cc" or ch in _BIDI)
        else ch
        for ch in text
    )


def file_size(path: str) -> int:
    """The size of the regular file at ``path``; CommandError for anything else."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise CommandError(f"Cannot read {safe(path)}: {error.strerror}.") from None
    if not stat.S_ISREG(info.st_mode):
        raise CommandError(f"{safe(path)} is not a regular file.")
    return info.st_size


def describe_limits(conf: PoolSettings, engine: str) -> str:
    pages = "all" if conf.max_pages is None else str(conf.max_pages)
    return (
        f"engine {engine}, timeout {fmt(conf.timeout, 'seconds')}, memory limit "
        f"{fmt(conf.memory_limit, 'bytes')}, pages {pages}, text "
        f"{fmt(conf.max_text_bytes, 'bytes')}, upload {fmt(conf.max_upload_size, 'bytes')}"
    )


def refuse_in_event_loop(message: str) -> None:
    """CommandError(``message``) when called from async code, whose loop it would block."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise CommandError(message)


def run(
    path: str, conf: PoolSettings, engine: str, progress: Callable[[float], None] | None
) -> Extraction:
    """Extract ``path`` in a cold child (no template left behind), calling ``progress(elapsed)``
    every ``PROGRESS_EVERY`` seconds while it runs; raises ExtractionError."""
    refuse_in_event_loop("pdfpool extract runs its own event loop: call it from synchronous code.")
    limits: dict[str, Any] = {name: getattr(conf, name) for name in LIMITS}

    async def extracting() -> Extraction:
        start = time.monotonic()
        task = asyncio.ensure_future(extract(path, warm=False, engine=engine, **limits))
        try:
            while not (await asyncio.wait({task}, timeout=PROGRESS_EVERY if progress else None))[0]:
                if progress is not None:
                    progress(time.monotonic() - start)
            return task.result()
        finally:
            if not task.done():  # interrupted (Ctrl-C): the child is killed and reaped
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    return asyncio.run(extracting())


def too_large(size: int, conf: PoolSettings) -> ExtractionError:
    """The refusal the decorator answers 413 with, before any work."""
    limit = conf.max_upload_size
    return ExtractionError(
        "too_large",
        Wording.TOO_LARGE.format(mib=limit / 1024 / 1024),
        detail=f"{size} bytes, over MAX_UPLOAD_SIZE ({limit} bytes)",
    )


def error_text(error: ExtractionError) -> str:
    """One line: the code, the message a user would see, and what the child reported."""
    figures = [f"detail: {safe(error.detail)}"] if error.detail else []
    if error.elapsed is not None:
        figures.append(f"elapsed {fmt(error.elapsed, 'seconds')}")
    if error.peak_rss is not None:
        figures.append(f"peak RSS {fmt(error.peak_rss, 'bytes')}")
    return f"{error} ({'; '.join(figures)})" if figures else str(error)


def summary(result: Extraction, *, full_text: bool) -> str:
    """The outcome as text: figures, metadata, and the text (a preview unless full)."""
    if result.text_truncated:
        cut = "yes, at the text limit (MAX_TEXT_BYTES)"
    else:
        cut = "yes, at the page limit (MAX_PAGES)" if result.truncated else "no"
    rows = [
        ("sha256", result.sha256),
        ("pages", f"{result.page_count} in the document, {len(result.pages)} extracted"),
        ("truncated", cut),
        ("text", f"{len(result.text)} characters"),
        ("elapsed", f"{fmt(result.elapsed, 'seconds')} in the child"),
        ("peak RSS", fmt(result.peak_rss, "bytes")),
    ]
    rows += [(f"meta {safe(key)}", safe(value)) for key, value in sorted(result.metadata.items())]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    if not full_text and len(result.text) > PREVIEW_CHARS:
        lines += [f"--- text, first {PREVIEW_CHARS} characters (--text for all) ---"]
        text = result.text[:PREVIEW_CHARS]
    else:
        lines, text = [*lines, "--- text ---"], result.text
    return "\n".join([*lines, safe(text, keep="\n\t"), ""])


def error_json(error: ExtractionError) -> dict[str, Any]:
    return {field: getattr(error, field) for field in ERROR_FIELDS}
