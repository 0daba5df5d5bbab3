"""The load benchmark's ASGI application: the example's own (``demo.asgi:application``, the
door in front of Django's handler) inside a wrapper that tells each client, in response
headers, what the server did with its body before answering, and nothing else:

- ``bench-asked-body``: 1 if the application called ``receive()`` before it answered (under
  uvicorn that first call is what sends ``100 Continue``), else 0;
- ``bench-body-read``: the body bytes the application had received when it answered;
- ``bench-app-ms``: milliseconds from the request's arrival at the application to its answer.
"""

from __future__ import annotations

import time
from typing import Any

from demo.asgi import application as example

Message = dict[str, Any]


class BodyCount:
    """ASGI middleware: count what ``app`` reads of each request's body before answering."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked, read, arrived = False, 0, time.perf_counter()

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
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, counted, tagged)


application = BodyCount(example)
