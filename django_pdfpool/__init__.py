"""django-pdfpool: admit expensive PDF work through a small scheduler.

The public names, loaded on first use so that ``import django_pdfpool`` imports no Django
and needs no settings. Where each lives: docs/architecture.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admission.protocol import AdmissionPool
    from .asgi import PdfPoolDoor, PoolLifespan
    from .decorators import extract_upload, pdf_pooled
    from .exceptions import (
        BadDigest,
        BodyTimeout,
        CallerBusy,
        DigestMismatch,
        ExtractionError,
        LengthRequired,
        NoUpload,
        PoolBusy,
        PoolClosed,
        PoolMisconfigured,
        Refused,
        RepeatedHeader,
        SandboxUnavailable,
        UploadRejected,
        UploadTooLarge,
    )
    from .pooled import aextract_pooled, caller_of, extract_pooled
    from .process_pool import adrain_pool, drain_pool, get_pool
    from .responses import html_answer, json_answer
    from .sandbox.extract import Extraction, extract
    from .status.collector import register_metrics
    from .status.metrics import metrics_view
    from .uploads import StagedUpload

__version__ = "0.1.0.dev0"

_HOMES = {  # public name -> the module that defines it
    "get_pool": "process_pool",
    "drain_pool": "process_pool",
    "adrain_pool": "process_pool",
    "pdf_pooled": "decorators",
    "extract_upload": "decorators",
    "StagedUpload": "uploads",
    "extract_pooled": "pooled",
    "caller_of": "pooled",
    "aextract_pooled": "pooled",
    "json_answer": "responses",
    "html_answer": "responses",
    "PoolLifespan": "asgi",
    "PdfPoolDoor": "asgi",
    "metrics_view": "status.metrics",
    "register_metrics": "status.collector",
    "extract": "sandbox.extract",
    "Extraction": "sandbox.extract",
    "ExtractionError": "exceptions",
    "Refused": "exceptions",
    "PoolBusy": "exceptions",
    "CallerBusy": "exceptions",
    "PoolClosed": "exceptions",
    "PoolMisconfigured": "exceptions",
    "SandboxUnavailable": "exceptions",
    "UploadRejected": "exceptions",
    "UploadTooLarge": "exceptions",
    "NoUpload": "exceptions",
    "BadDigest": "exceptions",
    "DigestMismatch": "exceptions",
    "RepeatedHeader": "exceptions",
    "LengthRequired": "exceptions",
    "BodyTimeout": "exceptions",
    "AdmissionPool": "admission.protocol",
}

__all__ = [
    "AdmissionPool",
    "BadDigest",
    "BodyTimeout",
    "CallerBusy",
    "DigestMismatch",
    "Extraction",
    "ExtractionError",
    "LengthRequired",
    "NoUpload",
    "PdfPoolDoor",
    "PoolBusy",
    "PoolClosed",
    "PoolLifespan",
    "PoolMisconfigured",
    "Refused",
    "RepeatedHeader",
    "SandboxUnavailable",
    "StagedUpload",
    "UploadRejected",
    "UploadTooLarge",
    "adrain_pool",
    "aextract_pooled",
    "caller_of",
    "drain_pool",
    "extract",
    "extract_pooled",
    "extract_upload",
    "get_pool",
    "html_answer",
    "json_answer",
    "metrics_view",
    "pdf_pooled",
    "register_metrics",
]


def __getattr__(name: str) -> Any:
    """A public name, read from its home module (imported on first use)."""
    if name in _HOMES:
        return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's own names and the public ones, loaded or not."""
    return sorted({*globals(), *__all__})
