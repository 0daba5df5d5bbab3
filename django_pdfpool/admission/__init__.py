"""The admission rules (slots, queue, wait, single-flight, one job per caller), no Django:
``Pool`` in one process, ``RedisPool`` across a Redis namespace's; both ``AdmissionPool``s."""

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
