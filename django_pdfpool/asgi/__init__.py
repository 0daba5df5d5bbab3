"""The package's ASGI wrappers, for a project's ``asgi.py``:
``application = PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))``.

``lifespan`` (``PoolLifespan``: stop accepting at a stop signal, drain at shutdown), ``door``
(``PdfPoolDoor``: the door before Django's handler reads a body), ``threads``
(``KeptThreads``: a request's sync code on a kept thread, not a new one) and ``types`` (the
ASGI types they speak). The wrappers load on first use, like the package's own names.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from .door import PdfPoolDoor
    from .lifespan import PoolLifespan
    from .threads import KeptThreads

_HOMES = {"PoolLifespan": "lifespan", "PdfPoolDoor": "door", "KeptThreads": "threads"}

__all__ = [
    "ASGIApp",
    "KeptThreads",
    "Message",
    "PdfPoolDoor",
    "PoolLifespan",
    "Receive",
    "Scope",
    "Send",
]


def __getattr__(name: str) -> Any:
    """A wrapper, read from its module (imported on first use)."""
    if name in _HOMES:
        return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
