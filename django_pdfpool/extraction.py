"""The public home of text extraction: ``from django_pdfpool.extraction import extract``.

The sandbox itself is ``django_pdfpool.sandbox``; this module names what users call.
"""

from __future__ import annotations

from .exceptions import ExtractionError
from .sandbox.extract import (
    PAGE_SEPARATOR,
    Extraction,
    configure,
    extract,
    prewarm,
    shutdown,
    spare_pids,
)

__all__ = [
    "PAGE_SEPARATOR",
    "Extraction",
    "ExtractionError",
    "configure",
    "extract",
    "prewarm",
    "shutdown",
    "spare_pids",
]
