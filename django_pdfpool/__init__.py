"""django-pdfpool: admit expensive PDF work through a small scheduler.

The names a project calls, each loaded from its module on first use: ``import django_pdfpool``
imports no Django. Exceptions, pools, sandbox and answers have their modules (docs/reference.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names re-exported (as themselves) for type checkers
    from .asgi import KeptThreads as KeptThreads
    from .asgi import PdfPoolDoor as PdfPoolDoor
    from .asgi import PoolLifespan as PoolLifespan
    from .callers import caller_of as caller_of
    from .configured import adrain_pool as adrain_pool
    from .configured import drain_pool as drain_pool
    from .configured import get_pool as get_pool
    from .decorators import pdf_pooled as pdf_pooled
    from .pooled import aextract_pooled as aextract_pooled
    from .pooled import extract_pooled as extract_pooled
    from .sandbox.extract import Extraction as Extraction
    from .sandbox.extract import extract as extract
    from .status.collector import register_metrics as register_metrics
    from .status.metrics import metrics_view as metrics_view
    from .uploads import StagedUpload as StagedUpload

__version__ = "0.1.0.dev0"

_HOMES = {  # each module -> the public names it defines
    "asgi": ("KeptThreads", "PdfPoolDoor", "PoolLifespan"),
    "callers": ("caller_of",),
    "configured": ("adrain_pool", "drain_pool", "get_pool"),
    "decorators": ("pdf_pooled",),
    "pooled": ("aextract_pooled", "extract_pooled"),
    "sandbox.extract": ("Extraction", "extract"),
    "status.collector": ("register_metrics",),
    "status.metrics": ("metrics_view",),
    "uploads": ("StagedUpload",),
}
__all__ = sorted(name for names in _HOMES.values() for name in names)


def __getattr__(name: str) -> Any:
    """A public name, read from its module (imported on first use)."""
    for module, names in _HOMES.items():
        if name in names:
            return getattr(import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
