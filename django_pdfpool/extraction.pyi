"""Types of ``django_pdfpool.extraction``, a module ``__init__`` serves from its map of public
names (``_PATHS``; tests/test_public_paths.py holds this file to that map)."""

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
