"""django-pdfpool: admit expensive PDF work through a small scheduler.

The names a project calls, each loaded from its module on first use so that
``import django_pdfpool`` imports no Django and needs no settings. The exceptions live in
``django_pdfpool.exceptions``, the pools in ``django_pdfpool.admission``, the sandbox's
process-wide controls in ``django_pdfpool.sandbox``, the answers in
``django_pdfpool.responses`` (docs/architecture.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .asgi import KeptThreads, PdfPoolDoor, PoolLifespan
    from .callers import caller_of
    from .configured import adrain_pool, drain_pool, get_pool
    from .decorators import pdf_pooled
    from .pooled import aextract_pooled, extract_pooled
    from .sandbox.extract import Extraction, extract
    from .status.collector import register_metrics
    from .status.metrics import metrics_view
    from .uploads import StagedUpload

__version__ = "0.1.0.dev0"

__all__ = [
    "Extraction",
    "KeptThreads",
    "PdfPoolDoor",
    "PoolLifespan",
    "StagedUpload",
    "adrain_pool",
    "aextract_pooled",
    "caller_of",
    "drain_pool",
    "extract",
    "extract_pooled",
    "get_pool",
    "metrics_view",
    "pdf_pooled",
    "register_metrics",
]

_HOMES = {  # each public name -> the module that defines it
    "Extraction": "sandbox.extract",
    "KeptThreads": "asgi",
    "PdfPoolDoor": "asgi",
    "PoolLifespan": "asgi",
    "StagedUpload": "uploads",
    "adrain_pool": "configured",
    "aextract_pooled": "pooled",
    "caller_of": "callers",
    "drain_pool": "configured",
    "extract": "sandbox.extract",
    "extract_pooled": "pooled",
    "get_pool": "configured",
    "metrics_view": "status.metrics",
    "pdf_pooled": "decorators",
    "register_metrics": "status.collector",
}


def __getattr__(name: str) -> Any:
    """A public name, read from its module (imported on first use)."""
    if name in _HOMES:
        return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
