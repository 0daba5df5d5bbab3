"""Every counter a pool keeps, declared once: ``Counter``, its name (in snapshots, JSON,
metrics and Redis's books), label, meaning, where the Redis pool counts it, and for a
refusal its reason code. The ledger, ``Counters``, the status page, the metrics, the
``pdfpool status`` command and the Lua scripts' test all read this enum (docs/metrics.md).
"""

from __future__ import annotations

from enum import Enum, StrEnum


class CountedBy(Enum):
    """Who counts a counter in a Redis-coordinated pool's cluster-wide books (the ``stats``
    hash). Every counter is also counted in each process's own ``Ledger``."""

    LUA = "lua"  # the script that decides the event tallies it by name: tally('joined', 1)
    PYTHON = "python"  # Python picks the name and hands it to a script (finish.lua's OUTCOME)
    PROCESS = "process"  # each process alone, never in Redis: no cluster-wide figure


class Counter(StrEnum):
    """One counter. A refusal counts once per refused caller; ``reason`` is its code in
    ``pdfpool_refused_total{reason}``, None for a job event (``pdfpool_jobs_total{event}``)."""

    label: str
    meaning: str
    counted_by: CountedBy
    reason: str | None

    def __new__(
        cls, name: str, label: str, meaning: str, counted_by: CountedBy, reason: str | None = None
    ) -> Counter:
        member = str.__new__(cls, name)
        member._value_ = name
        member.label, member.meaning = label, meaning
        member.counted_by, member.reason = counted_by, reason
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
        "busy",
    )
    REFUSED_CALLER = (
        "refused_caller",
        "Refused: caller",
        "caller already had a job in flight (429)",
        CountedBy.LUA,
        "caller_busy",
    )
    REFUSED_CLOSED = (
        "refused_closed",
        "Refused: closed",
        "the pool was draining or stopped (503)",
        CountedBy.PROCESS,
        "closed",
    )

    @classmethod
    def ended(cls, cancelled: bool, error: BaseException | None) -> Counter:
        """How a job that held a slot ended: cancelled, failed (raised) or completed."""
        return cls.CANCELLED if cancelled else cls.FAILED if error else cls.COMPLETED


__all__ = ["CountedBy", "Counter"]
