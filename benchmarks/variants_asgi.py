"""The load benchmark's ASGI application: the example's own (``demo.asgi:application``,
the door in front of Django's handler) inside a thin wrapper that tells each client, in
two response headers, what the server did with its body before answering:

- ``bench-asked-body``: 1 if the application called ``receive()`` before it answered
  (under uvicorn that first call is what sends ``100 Continue``), else 0;
- ``bench-body-read``: the body bytes the application had received when it answered;
- ``/bench/raw-health/`` is answered here, before Django (``door-rawhealth``): what the
  server process gives a request that needs nothing of Django, the floor of ``/bench/health/``;
- ``bench-app-ms``: milliseconds from the request's arrival at the application to its
  answer (the rest of a client's wait is the server's before that: accepting, parsing,
  waiting for the event loop or a CPU).

The wrapper does nothing else, for every variant alike (see bench_load.py).
``BENCH_ANSWER=pages`` (``door-pagechunks``) streams the API's answer as before session 8:
built on the loop for each sharer, a chunk per page, all in one callback; ``BENCH_ANSWER=loop``
(``door-loopchunks``) in 64 KiB chunks, one per turn, but built on the loop for each sharer.
``BENCH_GC_FREEZE=1`` (``door-gcfreeze``) freezes what start-up made (``gc.freeze()``).
``BENCH_THREADS=new`` (``door-newthreads``) leaves out the example's ``KeptThreads``: Django's
handler then starts a thread for each request and joins it after, as it ships.
``BENCH_NO_DB_SIGNALS=1`` (``door-nodbsignals``, a diagnostic: database connections are then
never closed) disconnects Django's sync receivers of ``request_started`` and
``request_finished``, so a request that needs no thread makes no thread hop.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from demo.asgi import application as example

Message = dict[str, Any]
RAW_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"12")]


class BodyCount:
    """ASGI middleware: count what ``app`` reads of each request's body before answering."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" and (watched := os.environ.get("BENCH_LOOPWATCH")):
            from benchmarks.lagwatch import watch_loop

            watch_loop(asyncio.get_running_loop(), watched)
        if scope["type"] == "lifespan" and (workers := os.environ.get("BENCH_EXECUTOR")):
            from concurrent.futures import ThreadPoolExecutor

            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(int(workers)))
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked, read, arrived, at = False, 0, time.perf_counter(), time.time()
        if scope["path"] == "/bench/raw-health/":
            headers = [*RAW_HEADERS, (b"bench-at", repr(at).encode()), (b"bench-app-ms", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"ok": true}'})
            return

        async def counted() -> Message:
            nonlocal asked, read
            asked = True
            message: Message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
            return message

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    *message.get("headers", ()),
                    (b"bench-asked-body", b"1" if asked else b"0"),
                    (b"bench-body-read", str(read).encode()),
                    (b"bench-app-ms", f"{(time.perf_counter() - arrived) * 1000:.3f}".encode()),
                    (b"bench-at", repr(at).encode()),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, counted, tagged)


def _new_threads(app: Any) -> Any:
    """The example's stack with ``KeptThreads`` left out (the door and lifespan kept)."""
    from django_pdfpool import KeptThreads, PdfPoolDoor, PoolLifespan

    assert isinstance(app, PdfPoolDoor) and isinstance(app.app, PoolLifespan)
    assert isinstance(app.app.app, KeptThreads)
    return PdfPoolDoor(PoolLifespan(app.app.app.app))


if os.environ.get("BENCH_GC_FREEZE"):  # ``door-gcfreeze``: start-up's objects frozen
    import gc

    gc.collect()
    gc.freeze()

if os.environ.get("BENCH_ANSWER"):  # ``door-pagechunks``, ``door-loopchunks``: as before
    from collections.abc import AsyncIterator

    from uploads import results

    from django_pdfpool import Extraction

    async def _pages(pdf: Extraction, text: bool) -> AsyncIterator[bytes]:
        for piece in results._pieces(pdf, text=text):  # built on the loop, for each sharer
            yield piece  # a chunk per page (and per piece of JSON around them)

    async def _on_loop(pdf: Extraction, text: bool) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(results.chunked(pdf, text=text)):
            if index:
                await asyncio.sleep(0)
            yield chunk  # 64 KiB chunks, one per turn, built on the loop for each sharer

    results._async = _pages if os.environ["BENCH_ANSWER"] == "pages" else _on_loop

if os.environ.get("BENCH_NO_DB_SIGNALS"):  # ``door-nodbsignals``: no thread hop at the start
    from django.core import signals
    from django.db import close_old_connections, reset_queries

    signals.request_started.disconnect(reset_queries)
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)

application = BodyCount(
    _new_threads(example) if os.environ.get("BENCH_THREADS") == "new" else example
)
