"""The conformance test's factory for ``RedisPool`` (``PDFPOOL_TEST_POOL``).

Each call is a pool in a namespace of its own on the server named by
``PDFPOOL_TEST_REDIS_URL`` (``python -m tests.support.redis_server`` sets it)."""

from __future__ import annotations

import os
from uuid import uuid4

from django_pdfpool.admission import RedisPool


def make_pool(slots: int = 2, queue: int = 4, wait: float | None = 10.0) -> RedisPool:
    """Pool's arguments; a fresh namespace per call."""
    return RedisPool(
        slots,
        queue,
        wait,
        url=os.environ["PDFPOOL_TEST_REDIS_URL"],
        namespace=f"conf-{uuid4().hex}",
    )
