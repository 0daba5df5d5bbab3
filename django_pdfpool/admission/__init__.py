"""The admission rules: slots, queue, wait, single-flight and one job per caller.

No Django, no PDFs. ``local.Pool`` keeps them in one process, ``redis.redis_pool.RedisPool``
across every process sharing a Redis namespace; both are ``protocol.AdmissionPool``s and
share a job's life (``jobs``) and what is counted and shown (``ledger``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .local import Pool
    from .protocol import AdmissionPool
    from .redis.redis_pool import RedisPool

__all__ = ["AdmissionPool", "Pool", "RedisPool"]

_HOMES = {"AdmissionPool": "protocol", "Pool": "local", "RedisPool": "redis.redis_pool"}


def __getattr__(name: str) -> Any:
    """A pool, read from its module (imported on first use)."""
    if name in _HOMES:
        return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
