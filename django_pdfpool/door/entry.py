"""The steps both adapters take between reading the headers and answering: who asks (the
``CALLER`` function, which may say it cannot know yet), the pool's pressure for the
upload's key and that caller, then the decision under this project's settings. Written
once (``verdict``, a step function) for a sync thread and an event loop (``door.steps``)."""

from __future__ import annotations

import dataclasses
import logging
import time
from functools import partial
from typing import Any

from django.http import HttpRequest

from ..admission.protocol import AdmissionPool
from ..admission.snapshot import Pressure
from ..callers import ASKING, acaller_of, address_caller, caller_of
from ..conf import DoorSettings, PoolSettings, get_settings
from ..configured import get_pool
from ..exceptions import CallerBusy, PoolBusy, PoolClosed
from .headers import UploadHeaders
from .rules import ARRIVING, Refusal, Terms, Ticket, decide
from .steps import Call, Steps
from .views import PooledView

logger = logging.getLogger("django_pdfpool.door")

Who = tuple[str, bool]
"""The caller id, and whether it is the caller (False: the address, the caller unknown yet)."""


def terms(conf: PoolSettings | None = None) -> Terms:
    """The door's terms from the settings."""
    conf = conf or get_settings()
    door = conf.door or DoorSettings.defaults()
    return Terms(
        max_upload_size=conf.max_upload_size,
        budget=door.budget,
        budget_bytes=door.budget_bytes,
        body_timeout=door.body_timeout,
        body_min_rate=door.body_min_rate,
        body_timeout_max=door.body_timeout_max,
    )


def key_of(view: PooledView, upload: UploadHeaders) -> str | None:
    """The single-flight key the upload declares (through its digest), if the door may
    answer from it (``DOOR["DIGESTS"]``)."""
    door = get_settings().door
    if upload.digest is None or door is None or not door.digests:
        return None
    return view.key(upload.digest)


def _who(request: HttpRequest, caller: str | None) -> Who:
    if caller is None:
        return address_caller(request.META.get("REMOTE_ADDR") or "unknown"), False
    return caller, True


def who_now(request: HttpRequest) -> Who:
    """The caller, asked from a sync request's thread (where it may read the database)."""
    request.META[ASKING] = True
    try:
        return _who(request, caller_of(request))
    except Exception:  # written for the decorator (it reads request.user, say): ask it there
        logger.debug("CALLER could not tell the door who asks", exc_info=True)
        return _who(request, None)
    finally:
        del request.META[ASKING]


async def awho(request: HttpRequest) -> Who:
    """The caller, asked from an event loop (``acaller_of``: a project's sync function
    runs in a thread)."""
    request.META[ASKING] = True
    try:
        return _who(request, await acaller_of(request))
    except Exception:  # as in who_now: the decorator asks again, after authentication
        logger.debug("CALLER could not tell the door who asks", exc_info=True)
        return _who(request, None)
    finally:
        del request.META[ASKING]


def judge(
    view: PooledView, upload: UploadHeaders, pressure: Pressure, who: Who
) -> tuple[Refusal | Ticket, Ticket | None]:
    """``decide`` with this project's settings and this process's arrivals; a refusal
    in the pool's name counts in the pool's counters, a shed in the door's. A shed while
    the caller has a body of its own arriving is not final: that body comes second."""
    verdict, shed = decide(
        upload, key_of(view, upload), pressure, ARRIVING, who=who[0], known=who[1], terms=terms()
    )
    if shed:
        own = ARRIVING.own(who[0])
        if own is not None:
            return verdict, own
        ARRIVING.count_shed()
    elif isinstance(verdict, PoolBusy | PoolClosed | CallerBusy):
        get_pool().count_refusal(verdict)
    return verdict, None


def verdict(
    view: PooledView, upload: UploadHeaders, request: HttpRequest
) -> Steps[Refusal | Ticket]:
    """The door's verdict on an upload, for either adapter to run (sync or async): who
    asks, the pool's pressure, then ``judge``. One body per caller arrives at a time: a
    caller's next upload that could only be shed waits (up to ``BODY_TIMEOUT``, holding
    nothing: a thread blocks, an event loop awaits a future) for the one it has arriving
    to reach the pool, then is decided again."""
    who = yield Call(partial(who_now, request), partial(_awho_resolved, request))
    give_up = time.monotonic() + terms().body_timeout
    while True:
        decided, own = judge(view, upload, (yield pressure(view, upload, who)), who)
        if own is None:
            return decided
        left = give_up - time.monotonic()
        if not (yield Call(partial(own.wait_released, left), partial(own.areleased, left))):
            ARRIVING.count_shed()
            return decided


async def _awho_resolved(request: HttpRequest) -> Who:
    """``awho``, after ``request.user`` is resolved once, as the decorator does (a sync
    request's lazy user is read where it is needed)."""
    if hasattr(request, "auser"):
        request.user = await request.auser()
    return await awho(request)


def pressure(view: PooledView, upload: UploadHeaders, who: Who) -> Call[Pressure]:
    """The pool's pressure for the upload and its caller; read off the event loop when
    reading it waits on the network (a Redis pool)."""
    pool: AdmissionPool = get_pool()
    read = partial(pool.pressure, key_of(view, upload), who[0] if who[1] else None)
    return Call.blocking(read) if pool.blocking_reads else Call.quick(read)


def door_status() -> dict[str, Any]:
    """This process's door, JSON-ready: the bodies arriving (caller, place or budget,
    bytes so far, age, seconds left), what was shed past the budget, what timed out."""
    conf = get_settings()
    door = conf.door or DoorSettings.defaults()
    return {
        "held": [dataclasses.asdict(held) for held in ARRIVING.held(terms(conf))],
        "shed": ARRIVING.shed,
        "timed_out": ARRIVING.timed_out,
        "budget": door.budget,
        "budget_bytes": door.budget_bytes,
        "body_timeout": door.body_timeout,
        "body_min_rate": door.body_min_rate,
        "body_timeout_max": door.body_timeout_max,
    }
