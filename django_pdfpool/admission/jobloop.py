"""The process's one background event loop, where pool jobs run.

Jobs must outlive the request that started them, and under WSGI every async view
gets a one-off event loop that is closed when the view returns. So jobs never run
on a caller's loop: they run here, on a daemon thread started on first use and
started afresh in a forked child (a loop's thread does not survive ``fork``).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def get_job_loop() -> asyncio.AbstractEventLoop:
    """Return the running background loop, starting its thread if needed."""
    global _loop
    loop = _loop
    if loop is not None:
        return loop
    with _lock:
        if _loop is None:
            ready = threading.Event()
            new_loop = asyncio.new_event_loop()

            def serve() -> None:
                asyncio.set_event_loop(new_loop)
                new_loop.call_soon(ready.set)
                new_loop.run_forever()

            threading.Thread(target=serve, name="pdfpool-jobs", daemon=True).start()
            ready.wait()
            _loop = new_loop
        return _loop


def on_job_loop() -> bool:
    """Whether the caller runs on the job loop's thread (where nothing may block)."""
    loop = _loop
    return loop is not None and loop.is_running() and _running_loop() is loop


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_in_job_loop(callback: Callable[..., Any], *args: Any) -> None:
    """Schedule ``callback(*args)`` on the background loop from any thread."""
    get_job_loop().call_soon_threadsafe(callback, *args)


def _forget_after_fork() -> None:
    # The child inherits the loop object but not the thread that ran it.
    global _loop, _lock
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
