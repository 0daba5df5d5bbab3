"""``PdfPoolDoor``: the door as ASGI middleware, in front of Django's handler, which reads
a whole body before any Django middleware runs. It decides from the headers before the
first ``receive()`` (so uvicorn never sends ``100 Continue`` to a refused upload), then
counts the body's bytes as they arrive and answers 413 at the limit (docs/door.md)."""

from __future__ import annotations

import io
from typing import Any

from django.core.handlers.asgi import ASGIRequest, get_script_prefix
from django.http import HttpResponse

from ..asgi import ASGIApp, Message, Receive, Scope, Send
from ..conf import get_settings
from ..exceptions import UploadRejected, UploadTooLarge
from ..responses import Answer, arefusal_answer
from .entry import apressure, judge
from .headers import UploadHeaders
from .rules import DOOR, Refusal, body_limit, too_large
from .views import pooled_view


class PdfPoolDoor:
    """``application = PdfPoolDoor(PoolLifespan(get_asgi_application()))``: uploads to
    ``@pdf_pooled`` views are refused before their body when the pool cannot take them;
    every other request goes to ``app`` untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or DOOR in scope:
            await self.app(scope, receive, send)
            return
        view = pooled_view(path_info(scope)) if get_settings().door else None
        if view is None:
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        try:
            upload = UploadHeaders.of(headers)
            verdict = judge(view, upload, await apressure(view, upload))
        except UploadRejected as rejected:
            verdict = rejected
        if isinstance(verdict, Exception):
            await send_refusal(scope, send, verdict, view.answer)
            return
        limit = body_limit(get_settings().max_upload_size, upload.raw)
        body = _CountedBody(scope, receive, send, limit, view.answer)
        try:
            await self.app({**scope, DOOR: verdict}, body.receive, body.send)
        finally:
            if verdict is not None:
                verdict.release()


def path_info(scope: Scope) -> str:
    """The path Django resolves, as ``ASGIRequest`` computes it."""
    script_name = get_script_prefix(scope)
    path: str = scope["path"]
    return path.removeprefix(script_name) if script_name else path


class _CountedBody:
    """``receive`` and ``send`` for one request let in: past ``limit`` body bytes, answer
    413 at once, tell the app the client left, and drop what the app sends after."""

    __slots__ = ("_answer", "_receive", "_scope", "_send", "answered", "limit", "received")

    def __init__(
        self, scope: Scope, receive: Receive, send: Send, limit: int, answer: Answer | None
    ) -> None:
        self._scope, self._receive, self._send = scope, receive, send
        self.limit, self.received, self.answered = limit, 0, False
        self._answer = answer

    async def receive(self) -> Message:
        if self.answered:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                conf = get_settings()
                refusal = too_large(conf.max_upload_size)
                await send_refusal(self._scope, self._send, refusal, self._answer)
                self.answered = True
                return {"type": "http.disconnect"}  # Django's handler stops reading here
        return message

    async def send(self, message: Message) -> None:
        if not self.answered:
            await self._send(message)


async def send_refusal(
    scope: Scope, send: Send, refusal: Refusal, answer: Answer | None = None
) -> None:
    """Answer ``refusal`` as the view's ``answer=`` or the ``REFUSAL_VIEW`` would, without
    reading the body. Only a 413 closes the connection: closing with a body still on its
    way resets it, and a client that sent a small body anyway (no ``Expect``) would lose
    the answer; the server then reads the rest and throws it away."""
    response = await arefusal_answer(ASGIRequest(scope, io.BytesIO()), refusal, answer)
    if isinstance(refusal, UploadTooLarge):
        response["Connection"] = "close"  # stop reading: the body is over the limit
    if not response.has_header("Content-Length"):
        response["Content-Length"] = str(len(response.content))
    await send_response(response, send)


async def send_response(response: HttpResponse, send: Send) -> None:
    """A complete (not streaming) Django response, as ASGI messages."""
    headers: list[tuple[bytes, bytes]] = [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()
    ]
    headers.extend(
        (b"Set-Cookie", cookie.output(header="").strip().encode("latin-1"))
        for cookie in response.cookies.values()
    )
    start: dict[str, Any] = {"type": "http.response.start", "status": response.status_code}
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
