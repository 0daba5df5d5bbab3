"""The public home of the admission pools: ``from django_pdfpool.pool import Pool``.

``RedisPool`` is imported on first use, so that redis-py stays an optional extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .admission.local import Pool
from .admission.protocol import AdmissionPool, DropFn, ErrorObserver, JobFn
from .exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    PoolBusy,
    PoolClosed,
    PoolMisconfigured,
    Refused,
    RunnerLost,
)

if TYPE_CHECKING:
    from .admission.redis.redis_pool import RedisPool

__all__ = [
    "AdmissionPool",
    "CallerBusy",
    "CoordinatorUnavailable",
    "DropFn",
    "ErrorObserver",
    "JobFn",
    "Pool",
    "PoolBusy",
    "PoolClosed",
    "PoolMisconfigured",
    "RedisPool",
    "Refused",
    "RunnerLost",
]


def __getattr__(name: str) -> Any:
    if name == "RedisPool":
        from .admission.redis.redis_pool import RedisPool

        return RedisPool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
