"""Types of ``django_pdfpool.pool``, a module ``__init__`` serves from its map of public names
(``_PATHS``; tests/test_public_paths.py holds this file to that map)."""

from .admission.local import Pool
from .admission.protocol import AdmissionPool, DropFn, ErrorObserver, JobFn
from .admission.redis.redis_pool import RedisPool
from .exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    PoolBusy,
    PoolClosed,
    PoolMisconfigured,
    Refused,
    RunnerLost,
)

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
