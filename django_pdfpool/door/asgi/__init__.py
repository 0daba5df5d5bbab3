"""Retired path: the door's ASGI wrapper is ``django_pdfpool.PdfPoolDoor`` (its module:
``django_pdfpool.asgi.door``). Its names still load from here, with a DeprecationWarning,
for one release. (A package, not a module, so that git sees the old module's move to
``asgi/door.py`` as a rename.)"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import Any

_MOVED = frozenset({"PdfPoolDoor", "path_info", "send_refusal", "send_response"})


def __getattr__(name: str) -> Any:
    """A name that moved to ``django_pdfpool.asgi.door``, with a DeprecationWarning."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"django_pdfpool.door.asgi is retired: import {name} from django_pdfpool.asgi.door"
        + (" (or PdfPoolDoor from django_pdfpool)" if name == "PdfPoolDoor" else ""),
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(import_module("django_pdfpool.asgi.door"), name)
