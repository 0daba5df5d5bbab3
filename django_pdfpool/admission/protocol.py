"""``AdmissionPool``: what every pool offers, whether in-process (``Pool``) or
coordinated in Redis (``RedisPool``). The Django side holds pools by this type only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from ..exceptions import CallerBusy, PoolBusy, PoolClosed
from .ledger import ClusterSnapshot, PoolSnapshot, Pressure

JobFn = Callable[[], Awaitable[Any]]
"""A job: called once, on the process's job loop; its result or error reaches every sharer."""
DropFn = Callable[[], None]
"""Called instead of the job's ``fn`` when that will never run (see ``run``)."""
ErrorObserver = Callable[[str, BaseException], None]
"""``observer(key, error)``: told of every job that fails, so no fault goes unseen."""


@runtime_checkable
class AdmissionPool(Protocol):
    """Slots, a queue, a wait, single-flight by key and one job per caller (docs/pool.md)."""

    slots: int
    queue_size: int
    wait: float | None
    blocking_reads: bool
    """True when the reads below wait on the network: call them off an event loop."""

    async def run(
        self, key: str, caller: str, fn: JobFn | None, *, on_drop: DropFn | None = None,
        size: int | None = None,
    ) -> Any:  # fmt: skip
        """Run ``fn`` as the job for ``key``, or share the job in flight for ``key``.
        Exactly one of ``fn()`` and ``on_drop()`` is eventually called. ``size``: the bytes
        of the job's input, read back in ``pressure().sizes``."""

    def running(self) -> int:
        """Jobs holding a slot."""

    def queued(self) -> int:
        """Jobs waiting for a slot."""

    def waiting(self, key: str) -> int:
        """Callers sharing ``key``'s job, not counting the one that started it."""

    def pressure(self, key: str | None = None, caller: str | None = None) -> Pressure:
        """What a door reads before a request's body (the pool decides): see ``Pressure``."""

    def count_refusal(
        self, refusal: PoolBusy | PoolClosed | CallerBusy, caller: str | None = None
    ) -> None:
        """Count a refusal given in the pool's name without ``run`` (the door's, before a body
        is read): the pool's counters tell every refusal; ``caller``'s next Retry-After grows."""

    def idle(self) -> bool:
        """Nothing of this process in flight: no job run or queued here, no caller waiting."""

    def snapshot(self) -> PoolSnapshot:
        """One consistent reading, for status pages and metrics."""

    def cluster_snapshot(self) -> ClusterSnapshot | None:
        """Who holds what across processes; None for a pool of one process."""

    def close(self) -> None:
        """Stop accepting; jobs in flight go on. Safe from any thread."""

    async def drain(self) -> None:
        """Stop accepting; let running and queued jobs finish, then return."""

    async def stop(self) -> None:
        """Stop accepting; refuse the queued and cancel the running."""
