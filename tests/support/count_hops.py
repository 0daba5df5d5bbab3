"""Thread hand-offs per request of the example project under ASGI: each hand-off waits for a
CPU on a busy machine, so the example's middleware runs its hooks on the event loop.

``python -m tests.support.count_hops [--json] [PATH ...]`` builds the example's application
(its settings, middleware and door; ``tests.support.hops_settings`` adds the ``/bench/``
pages, and Django's middleware as it ships with ``BENCH_MIDDLEWARE=classic``) in this
process and sends each PATH (default: ``/bench/health/``, ``/``) through it a few times,
counting per request, after a warm-up:

- ``sync_to_async``: hand-offs from the event loop to a thread (asgiref's ``SyncToAsync``);
- ``async_to_sync``: hand-offs back (a sync-only middleware in the async chain);
- ``threads``: ``Thread.start()`` calls made while the request ran (asgiref's per-request
  thread-sensitive executor and the thread that joins it; each waits for a CPU).

The counting wraps asgiref's and threading's entry points in this diagnostic process only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "example_project")]

COUNTS = {"sync_to_async": 0, "async_to_sync": 0, "threads": 0}


def _counting() -> None:
    from asgiref import sync

    def wrap(cls: Any, name: str) -> None:
        original = cls.__call__

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            COUNTS[name] += 1
            return original(self, *args, **kwargs)

        cls.__call__ = counted

    wrap(sync.SyncToAsync, "sync_to_async")
    wrap(sync.AsyncToSync, "async_to_sync")
    start = threading.Thread.start

    def started(self: threading.Thread) -> None:
        COUNTS["threads"] += 1
        start(self)

    threading.Thread.start = started  # type: ignore[method-assign]


async def _get(app: Any, path: str) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"accept", b"text/html")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await asyncio.Event().wait()  # no disconnect while the request runs
        received = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


async def count(paths: list[str], rounds: int = 5) -> dict[str, dict[str, float]]:
    from demo.asgi import application

    found = {}
    for path in paths:
        for _ in range(2):
            await _get(application, path)  # warm-up: first-request imports and threads
        await asyncio.sleep(0.05)
        before = dict(COUNTS)
        status = 0
        for _ in range(rounds):
            status = await _get(application, path)
        found[path] = {k: (COUNTS[k] - before[k]) / rounds for k in COUNTS} | {"status": status}
    return found


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.hops_settings")
    os.environ.setdefault("DEMO_STATE_DIR", tempfile.mkdtemp(prefix="pdfpool-hops-"))
    os.environ.setdefault("DEMO_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    _counting()
    args = sys.argv[1:]
    as_json = "--json" in args
    paths = [a for a in args if a != "--json"] or ["/bench/health/", "/"]
    if as_json:  # one line, for tests/e2e/test_example_middleware.py
        print(json.dumps(asyncio.run(count(paths))))
        return
    print("middleware:", ", ".join(m.rsplit(".", 1)[-1] for m in settings.MIDDLEWARE))
    print("| path | status | sync_to_async | async_to_sync | Thread.start |")
    print("|---|---:|---:|---:|---:|")
    for path, got in asyncio.run(count(paths)).items():
        print(
            f"| {path} | {got['status']:.0f} | {got['sync_to_async']:g} "
            f"| {got['async_to_sync']:g} | {got['threads']:g} |"
        )


if __name__ == "__main__":
    main()
