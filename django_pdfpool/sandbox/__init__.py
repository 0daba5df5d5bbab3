"""The extraction sandbox: untrusted PDFs read in limited, short-lived child processes. Parent
side: extract, children; child side: child_main, engines, confine; both: wire. The controls
below load ``extract`` on first use: a child imports this package, never the parent side."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .extract import PAGE_SEPARATOR, SandboxLayers, configure, prewarm, sandbox_layers, shutdown

__all__ = ["PAGE_SEPARATOR", "SandboxLayers", "configure", "prewarm", "sandbox_layers", "shutdown"]


def __getattr__(name: str) -> Any:
    """A control, read from ``extract`` (imported on first use)."""
    if name in __all__:
        return getattr(import_module(f"{__name__}.extract"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
