"""ASGI lifespan support: drain the pool when the server shuts down.

Django's ASGI handler does not speak the lifespan protocol, so wrap it::

    application = PoolLifespan(get_asgi_application())

On ``lifespan.shutdown`` (uvicorn, hypercorn, daphne send it after in-flight
requests) the pool stops accepting, finishes its queue, then acknowledges.
"""

from __future__ import annotations

from typing import Any

from .singleton import adrain_pool

Scope = dict[str, Any]


class PoolLifespan:
    """ASGI middleware answering lifespan events; everything else goes to ``app``."""

    def __init__(self, app: Any, *, drain_timeout: float | None = None) -> None:
        self.app = app
        self.drain_timeout = drain_timeout

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await adrain_pool(self.drain_timeout)
                await send({"type": "lifespan.shutdown.complete"})
                return
