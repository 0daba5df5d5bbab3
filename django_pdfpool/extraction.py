"""The public home of text extraction: ``from django_pdfpool.extraction import extract``.

The sandbox itself is ``django_pdfpool.sandbox``; this module names what users call.
"""

from __future__ import annotations

from .exceptions import ExtractionError
from .sandbox.extract import (
    PAGE_SEPARATOR,
    Extraction,
    child_starts,
    configure,
    extract,
    idle_pids,
    prewarm,
    register_engine,
    sandbox_layers,
    shutdown,
)
from .sandbox.layers import SandboxLayers
from .sandbox.template import ChildStarts

__all__ = [
    "PAGE_SEPARATOR",
    "ChildStarts",
    "Extraction",
    "ExtractionError",
    "SandboxLayers",
    "child_starts",
    "configure",
    "extract",
    "idle_pids",
    "prewarm",
    "register_engine",
    "sandbox_layers",
    "shutdown",
]
