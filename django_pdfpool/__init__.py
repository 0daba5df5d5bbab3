"""django-pdfpool: admit expensive PDF work through a small scheduler.

The one map of public names: this module's, and those of ``django_pdfpool.pool`` and
``django_pdfpool.extraction`` (modules served from here, typed by their ``.pyi``). Each is
loaded on first use, so that ``import django_pdfpool`` imports no Django and needs no
settings. Where each lives: docs/architecture.md.
"""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admission.protocol import AdmissionPool
    from .asgi import KeptThreads, PdfPoolDoor, PoolLifespan
    from .configured import adrain_pool, drain_pool, get_pool
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
    from .responses import html_answer, json_answer
    from .sandbox.extract import Extraction, extract
    from .status.collector import register_metrics
    from .status.metrics import metrics_view
    from .uploads import StagedUpload

__version__ = "0.1.0.dev0"

_HOMES = {  # public name -> the module that defines it
    "get_pool": "configured",
    "drain_pool": "configured",
    "adrain_pool": "configured",
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
    "KeptThreads": "asgi",
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

_PATHS = {  # the other public modules, served from here (no file of their own) -> their names
    "pool": {  # the admission pools and their refusals, outside Django too (docs/pool.md)
        "Pool": "admission.local",
        "RedisPool": "admission.redis.redis_pool",  # imported on first use: redis-py is an extra
        "AdmissionPool": "admission.protocol",
        "DropFn": "admission.protocol",
        "ErrorObserver": "admission.protocol",
        "JobFn": "admission.protocol",
        "Refused": "exceptions",
        "PoolBusy": "exceptions",
        "CallerBusy": "exceptions",
        "PoolClosed": "exceptions",
        "PoolMisconfigured": "exceptions",
        "CoordinatorUnavailable": "exceptions",
        "RunnerLost": "exceptions",
    },
    "extraction": {  # text extraction in the sandbox, and its process-wide controls
        "extract": "sandbox.extract",
        "Extraction": "sandbox.extract",
        "PAGE_SEPARATOR": "sandbox.extract",
        "configure": "sandbox.extract",
        "prewarm": "sandbox.extract",
        "shutdown": "sandbox.extract",
        "register_engine": "sandbox.extract",
        "child_starts": "sandbox.extract",
        "idle_pids": "sandbox.extract",
        "sandbox_layers": "sandbox.extract",
        "ChildStarts": "sandbox.template",
        "SandboxLayers": "sandbox.layers",
        "ExtractionError": "exceptions",
    },
}

RENAMED = {  # modules renamed before the first release: the old paths are gone (changelog)
    "process_pool": "configured",
    "admission.redis.pool": "admission.redis.redis_pool",
}

__all__ = [
    "AdmissionPool",
    "BadDigest",
    "BodyTimeout",
    "CallerBusy",
    "DigestMismatch",
    "Extraction",
    "ExtractionError",
    "KeptThreads",
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


class _PublicPath(ModuleType):
    """A public module with no file: each name read from its home on first use."""

    def __init__(self, name: str, homes: dict[str, str]) -> None:
        super().__init__(f"{__name__}.{name}", f"Public names: {', '.join(sorted(homes))}.")
        self._homes = homes
        self.__all__ = sorted(homes)

    def __getattr__(self, name: str) -> Any:
        if name not in self._homes:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return getattr(import_module(f"{__name__}.{self._homes[name]}"), name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.__all__})


def _install(module: ModuleType) -> ModuleType:
    """``module`` importable by its name (``import``, ``from ... import``, import_module),
    with a spec so that ``importlib.util.find_spec`` finds it too."""
    module.__spec__ = ModuleSpec(module.__name__, None)
    module.__package__ = module.__name__.rpartition(".")[0]
    return sys.modules.setdefault(module.__name__, module)


_SERVED = {name: _install(_PublicPath(name, homes)) for name, homes in _PATHS.items()}


def __getattr__(name: str) -> Any:
    """A public name, read from its home module (imported on first use); or a public path."""
    if name in _HOMES:
        return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    if name in _SERVED:
        return _SERVED[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's own names and the public ones, loaded or not."""
    return sorted({*globals(), *__all__})
