"""Every counter a pool keeps, declared once: ``Counter``, its name (in snapshots, JSON,
metrics and Redis's books), label, meaning, where the Redis pool counts it, and for a
refusal its reason code. The ledger, ``Counters``, the status page, the metrics, the
``pdfpool status`` command and the Lua scripts' test all read this enum (docs/metrics.md).
"""

from __future__ import annotations

from enum import Enum, StrEnum

from ..exceptions import CallerBusy, PoolBusy, PoolClosed, Refused


class CountedBy(Enum):
    """Who counts a counter in a Redis-coordinated pool's cluster-wide books (the ``stats``
    hash). Every counter is also counted in each process's own ``Ledger``."""

    LUA = "lua"  # the script that decides the event tallies it by name: tally('joined', 1)
    PYTHON = "python"  # Python picks the name and hands it to a script (finish.lua's OUTCOME)
    PROCESS = "process"  # each process alone, never in Redis: no cluster-wide figure


class Counter(StrEnum):
    """One counter. A refusal counter counts the callers refused with ``refusal`` (or a
    subclass), once per caller; its ``reason``, that refusal's ``code``, is its label in
    ``pdfpool_refused_total{reason}``. A job event has neither (``pdfpool_jobs_total{event}``)."""

    label: str
    meaning: str
    counted_by: CountedBy
    refusal: type[Refused] | None

    def __new__(
        cls,
        name: str,
        label: str,
        meaning: str,
        counted_by: CountedBy,
        refusal: type[Refused] | None = None,
    ) -> Counter:
        member = str.__new__(cls, name)
        member._value_ = name
        member.label, member.meaning = label, meaning
        member.counted_by, member.refusal = counted_by, refusal
        return member

    STARTED = "started", "Started", "jobs that took a slot", CountedBy.LUA
    JOINED = "joined", "Joined", "callers that shared a job in flight", CountedBy.LUA
    COMPLETED = "completed", "Completed", "jobs that returned a result", CountedBy.PYTHON
    FAILED = "failed", "Failed", "jobs that raised", CountedBy.PYTHON
    CANCELLED = "cancelled", "Cancelled", "running jobs cancelled by stop()", CountedBy.PYTHON
    ABANDONED = "abandoned", "Abandoned", "queued jobs every waiter left", CountedBy.LUA
    REFUSED_BUSY = (
        "refused_busy",
        "Refused: busy",
        "queue full, or waited longer than wait (503)",
        CountedBy.LUA,
        PoolBusy,
    )
    REFUSED_CALLER = (
        "refused_caller",
        "Refused: caller",
        "caller already had a job in flight (429)",
        CountedBy.LUA,
        CallerBusy,
    )
    REFUSED_CLOSED = (
        "refused_closed",
        "Refused: closed",
        "the pool was draining or stopped (503)",
        CountedBy.PROCESS,
        PoolClosed,
    )

    @property
    def reason(self) -> str | None:
        """A refusal's code (``PoolBusy.code``...); None for a job event."""
        return None if self.refusal is None else self.refusal.code

    @classmethod
    def refused(cls, refusal: PoolBusy | PoolClosed | CallerBusy) -> Counter:
        """The counter a refusal counts in (a ``CoordinatorUnavailable`` is a ``PoolBusy``)."""
        return next(c for c in cls if c.refusal is not None and isinstance(refusal, c.refusal))

    @classmethod
    def ended(cls, cancelled: bool, error: BaseException | None) -> Counter:
        """How a job that held a slot ended: cancelled, failed (raised) or completed."""
        return cls.CANCELLED if cancelled else cls.FAILED if error else cls.COMPLETED


__all__ = ["CountedBy", "Counter"]


REFUSALS = tuple(counter for counter in Counter if counter.reason is not None)
"""The counters of refusals, in the enum's order (the chart's total, the metric's reasons)."""
