"""django-pdfpool: admit expensive PDF work through a small scheduler.

``django_pdfpool.pool`` imports no Django, so importing the package stays cheap
and settings-free; the Django-facing names below load on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0.dev0"
__all__ = ["get_pool", "pdf_pooled"]

_LAZY = {"get_pool": "singleton", "pdf_pooled": "decorators"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
