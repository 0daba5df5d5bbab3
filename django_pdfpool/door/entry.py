"""The steps both adapters take between reading the headers and answering: the pool's
pressure for the upload's key, then the decision under this project's settings."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from ..admission.protocol import AdmissionPool
from ..admission.snapshot import Pressure
from ..conf import get_settings
from ..exceptions import PoolBusy, PoolClosed
from ..process_pool import get_pool
from .headers import UploadHeaders
from .rules import ARRIVING, Refusal, Ticket, decide
from .views import PooledView


def key_of(view: PooledView, upload: UploadHeaders) -> str | None:
    """The single-flight key the upload declares (through its digest), if any."""
    return None if upload.digest is None else view.key(upload.digest)


def judge(view: PooledView, upload: UploadHeaders, pressure: Pressure) -> Refusal | Ticket | None:
    """``decide`` with this project's settings and this process's arrivals; a refusal
    in the pool's name counts in the pool's counters."""
    conf = get_settings()
    verdict = decide(
        upload,
        key_of(view, upload),
        pressure,
        ARRIVING,
        max_upload_size=conf.max_upload_size,
        shed_undeclared=conf.shed_undeclared,
    )
    if isinstance(verdict, PoolBusy | PoolClosed):
        get_pool().count_refusal(verdict)
    return verdict


def pressure_now(view: PooledView, upload: UploadHeaders) -> Pressure:
    """The pool's pressure for the upload, read here (a sync request's thread)."""
    return get_pool().pressure(key_of(view, upload))


async def apressure(view: PooledView, upload: UploadHeaders) -> Pressure:
    """The pool's pressure for the upload, off the event loop when reading it waits on
    the network (a Redis pool)."""
    pool: AdmissionPool = get_pool()
    if pool.blocking_reads:
        return await sync_to_async(pool.pressure, thread_sensitive=False)(key_of(view, upload))
    return pool.pressure(key_of(view, upload))
