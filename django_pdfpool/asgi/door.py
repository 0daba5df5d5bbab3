"""``PdfPoolDoor``: the door as ASGI middleware, in front of Django's handler, which reads
a whole body before any Django middleware runs. It decides from the headers before the
first ``receive()`` (so uvicorn never sends ``100 Continue`` to a refused upload), then
counts the body's bytes as they arrive: 413 at the limit, 408 past the body's deadline,
each with the connection closed (docs/door.md)."""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

from django.core.handlers.asgi import ASGIRequest, get_script_prefix
from django.http import HttpResponse

from ..conf import get_settings
from ..door import entry
from ..door.entry import terms
from ..door.headers import UploadHeaders, is_post
from ..door.rules import (
    DOOR,
    TIMED_OUT,
    Refusal,
    Terms,
    Ticket,
    body_limit,
    closes_connection,
    too_large,
)
from ..door.steps import arun_steps
from ..door.views import pooled_view
from ..exceptions import BodyTimeout, UploadRejected
from ..responses import RefusalView, arefusal_answer, prebuilt_answer
from .types import ASGIApp, Message, Receive, Scope, Send


class PdfPoolDoor:
    """``application = PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))``:
    uploads to ``@pdf_pooled`` views are refused before their body when the pool cannot take
    them; every other request goes to ``app`` untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_post(scope.get("method")) or DOOR in scope:
            await self.app(scope, receive, send)
            return
        view = pooled_view(path_info(scope)) if get_settings().door else None
        if view is None:
            await self.app(scope, receive, send)
            return
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope.get("headers", ())
        ]
        verdict: Refusal | Ticket
        try:
            upload = UploadHeaders.of(headers)
        except UploadRejected as rejected:
            verdict = rejected
        else:
            request = ASGIRequest(scope, io.BytesIO())
            verdict = await arun_steps(entry.verdict(view, upload, request))
        if not isinstance(verdict, Ticket):
            await send_refusal(scope, send, verdict, view.answer)
            return
        limit = body_limit(get_settings().max_upload_size, upload.raw)
        body = _CountedBody(scope, receive, send, limit, view.answer, verdict, terms())
        try:
            await self.app({**scope, DOOR: verdict}, body.receive, body.send)
        finally:
            verdict.release()


def path_info(scope: Scope) -> str:
    """The path Django resolves, as ``ASGIRequest`` computes it."""
    script_name = get_script_prefix(scope)
    path: str = scope["path"]
    return path.removeprefix(script_name) if script_name else path


class _CountedBody:
    """``receive`` and ``send`` for one request let in: past ``limit`` body bytes answer
    413, past the ticket's deadline 408 (its place goes back), tell the app the client
    left, and drop what the app sends after. Once the body is in, messages pass."""

    __slots__ = (
        "_answer",
        "_receive",
        "_scope",
        "_send",
        "_terms",
        "answered",
        "complete",
        "limit",
        "ticket",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        limit: int,
        answer: RefusalView | None,
        ticket: Ticket,
        terms: Terms,
    ) -> None:
        self._scope, self._receive, self._send = scope, receive, send
        self.limit, self.answered, self.complete = limit, False, False
        self._answer, self.ticket, self._terms = answer, ticket, terms

    async def receive(self) -> Message:
        if self.answered:
            return {"type": "http.disconnect"}
        if self.complete:
            return await self._receive()  # Django listening for a disconnect
        left = self.ticket.deadline(self._terms) - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            message = await asyncio.wait_for(self._receive(), left)
        except TimeoutError:
            self.ticket.time_out()
            return await self._refuse(BodyTimeout(TIMED_OUT))
        if message["type"] == "http.request":
            self.ticket.received += len(message.get("body", b""))
            if self.ticket.received > self.limit:
                return await self._refuse(too_large(get_settings().max_upload_size))
            self.complete = not message.get("more_body", False)
        return message

    async def _refuse(self, refusal: Refusal) -> Message:
        await send_refusal(self._scope, self._send, refusal, self._answer)
        self.answered = True
        return {"type": "http.disconnect"}  # Django's handler stops reading here

    async def send(self, message: Message) -> None:
        if not self.answered:
            await self._send(message)


async def send_refusal(
    scope: Scope, send: Send, refusal: Refusal, answer: RefusalView | None = None
) -> None:
    """Answer ``refusal`` as the view's ``answer=`` or the ``REFUSAL_VIEW`` would, without
    reading the body. A 413 or a 408 closes the connection (``closes_connection``); after
    any other the server reads the rest of the body and throws it away. An answer that
    reads nothing of the request is built once per distinct answer (``prebuilt_answer``)."""
    closing = closes_connection(refusal)
    built = None if closing else prebuilt_answer(refusal, answer)
    if built is not None:
        status, headers, body = built
        await send({"type": "http.response.start", "status": status, "headers": list(headers)})
        await send({"type": "http.response.body", "body": body})
        return
    response = await arefusal_answer(ASGIRequest(scope, io.BytesIO()), refusal, answer)
    if closing:
        response["Connection"] = "close"  # stop reading: the body is over the limit, or late
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
