"""What a pool's limits must be, declared once: both pools check their arguments with these
bounds (``records.check_terms``) and the SLOTS, QUEUE and WAIT settings are checked with them."""

from __future__ import annotations

from ..bounds import integer, or_none, seconds

SLOTS = integer(1)  # jobs running at once
QUEUE = integer(0)  # jobs waiting for a slot
WAIT = or_none(seconds(at_least=0))  # seconds a queued job waits, then PoolBusy; None: no end
