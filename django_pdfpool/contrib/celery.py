"""Celery: ``PooledTask``, a task base whose retries after a refusal (``autoretry_for``,
``self.retry``) wait what the pool said, the refusal's ``retry_after`` (docs/celery.md)."""

from __future__ import annotations

import random
import sys
from datetime import datetime
from typing import Any

from celery import Task  # type: ignore[import-untyped]

from ..exceptions import CallerBusy, PoolBusy, Refused, RunnerLost

__all__ = ["PooledTask"]


class PooledTask(Task):  # type: ignore[misc]  # Celery has no type hints
    """Retried on ``PoolBusy``, ``CallerBusy`` and ``RunnerLost``, ten times at most, each
    after the refusal's ``retry_after`` or Celery's backoff, the longer, jittered."""

    autoretry_for = (PoolBusy, CallerBusy, RunnerLost)
    retry_backoff = True  # 1, 2, 4... s at most: a refusal repeated waits longer
    retry_jitter = True  # Celery's default, which Task itself does not declare
    max_retries = 10

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        """Celery's ``Task.retry``, its countdown no shorter than the refusal's estimate (``exc``,
        else the exception being handled, as Celery takes it)."""
        refusal = exc if exc is not None else sys.exc_info()[1]
        if isinstance(refusal, Refused) and eta is None:
            estimate = max(1.0, refusal.retry_after)
            if self.retry_jitter:
                estimate *= random.uniform(1.0, 1.5)
            countdown = max(countdown or 0.0, estimate)
        return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
