"""What an integration says for each failure: the status, code, message and retry time the
decorator answers with, for frameworks that answer through their own exceptions."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..exceptions import (
    BadDigest,
    CallerBusy,
    CoordinatorUnavailable,
    DigestMismatch,
    ExtractionError,
    NoUpload,
    PoolBusy,
    PoolClosed,
    PoolMisconfigured,
    Refused,
    RunnerLost,
    UploadRejected,
    UploadTooLarge,
)
from ..responses import MISCONFIGURED, Failure


@dataclass(frozen=True)
class Described:
    """A failure as a client is told it; ``retry_after`` in whole seconds (at least 1)."""

    status: int
    code: str
    message: str
    retry_after: int | None


def describe(error: Failure) -> Described:
    """PoolBusy and PoolClosed 503, CallerBusy 429 (with a retry time), ExtractionError
    422, UploadRejected 400 or 413: as ``responses.error_answer`` answers them."""
    if isinstance(error, ExtractionError):
        return Described(422, error.code, error.message, None)
    if isinstance(error, Refused):
        status = 429 if isinstance(error, CallerBusy) else 503
        message = MISCONFIGURED if isinstance(error, PoolMisconfigured) else str(error)
        return Described(status, error.code, message, max(1, math.ceil(error.retry_after)))
    return Described(error.status, error.code, str(error), None)


_REFUSALS: dict[str, type[Refused]] = {
    kind.code: kind for kind in (PoolBusy, CallerBusy, PoolClosed, PoolMisconfigured, RunnerLost)
}
_REFUSALS[CoordinatorUnavailable.code] = CoordinatorUnavailable
_REJECTIONS: dict[str, type[UploadRejected]] = {
    kind.code: kind for kind in (UploadTooLarge, NoUpload, BadDigest, DigestMismatch)
}


def rebuilt(status: int, code: str, message: str, retry_after: float | None) -> Failure:
    """The library's exception behind an ``Answer``'s arguments (what the door hands a
    view's ``answer=``), so that an integration answers the door's refusals as its view
    answers the same exception."""
    if status == 422:
        return ExtractionError(code, message)
    if status in (429, 503):
        return _REFUSALS.get(code, CallerBusy if status == 429 else PoolBusy)(
            message, retry_after or 0.0
        )
    return _REJECTIONS.get(code, UploadTooLarge if status == 413 else UploadRejected)(message)
