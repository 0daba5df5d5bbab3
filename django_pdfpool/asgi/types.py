"""The ASGI types both ASGI wrappers speak, in the shape django-stubs gives Django's own
handler (scopes and messages as ``dict[str, Any]``). ``asgiref.typing``'s TypedDicts do not
fit under mypy strict: Django's ``ASGIHandler`` is not an ``ASGI3Application`` by them, and
the door adds a key of its own to the scope it passes on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send"]
