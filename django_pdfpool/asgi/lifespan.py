"""``PoolLifespan``, for ASGI servers: ``application = PoolLifespan(get_asgi_application())``.
The pool stops accepting at SIGTERM/SIGINT and drains at ``lifespan.shutdown``, an event
Django's own handler does not answer (docs/deployment.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Any

from ..configured import adrain_pool, peek_pool
from ..sandbox.extract import shutdown as shutdown_extraction
from .types import ASGIApp, Receive, Scope, Send

Handler = Any  # what signal.getsignal returns: a callable, SIG_DFL, SIG_IGN or None

SIGNALS = (signal.SIGTERM, signal.SIGINT)

logger = logging.getLogger("django_pdfpool")


class PoolLifespan:
    """ASGI middleware answering lifespan events; everything else goes to ``app``.

    ``drain_timeout``: seconds the shutdown drain may take before what is left is
    stopped (None: ``WAIT + TIMEOUT + 5``). ``close_on_signal=False`` leaves the
    signal handlers alone: the pool then stops accepting only at ``lifespan.shutdown``.
    """

    def __init__(
        self, app: ASGIApp, *, drain_timeout: float | None = None, close_on_signal: bool = True
    ) -> None:
        self.app = app
        self.drain_timeout = drain_timeout
        self.close_on_signal = close_on_signal
        self._chained: dict[int, tuple[Handler, Handler]] = {}  # signal -> (ours, previous)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Lifespan events are answered here; every other scope goes to ``app``."""
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.close_on_signal:
                    self._chain(asyncio.get_running_loop())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._unchain()
                await adrain_pool(self.drain_timeout)
                # the warm template, killed and reaped before the server exits (uvicorn
                # re-raises SIGTERM, so atexit hooks never run)
                await asyncio.to_thread(shutdown_extraction)
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _chain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Put our handler in front of the server's for each stop signal, from the main thread
        only (nowhere else can handlers be set). Only a Python callable is chained: SIG_DFL
        ends the process anyway; SIG_IGN or a C-level handler: nothing stops on that signal."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number in SIGNALS:
            previous = signal.getsignal(number)
            if not callable(previous):
                continue

            def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                # Not pool.close() here: a Python signal handler runs between two bytecodes
                # of the main thread, which may be holding the pool's lock at that moment.
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to close
                    loop.call_soon_threadsafe(_close_pool, signum)
                previous(signum, frame)

            signal.signal(number, handler)
            self._chained[number] = (handler, previous)

    def _unchain(self) -> None:
        """Put the previous handlers back, unless someone replaced ours meanwhile."""
        chained, self._chained = self._chained, {}
        if threading.current_thread() is not threading.main_thread():
            return
        for number, (ours, previous) in chained.items():
            if signal.getsignal(number) is ours:
                signal.signal(number, previous)


def _close_pool(signum: int) -> None:
    """On the server's loop, just after a stop signal: refuse new work from now on."""
    pool = peek_pool()
    if pool is not None:
        pool.close()
        logger.info("%s: the PDF pool accepts no new work", signal.Signals(signum).name)
