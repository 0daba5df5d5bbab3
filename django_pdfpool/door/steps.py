"""The door's logic written once for a sync thread and an event loop alike (sans IO): a
step function is a generator that yields each piece of IO as a ``Call``, its sync side and
its async side; ``run_steps`` does the sync sides on this thread, ``arun_steps`` awaits the
async ones. (psycopg writes its protocol the same way: generators, a sync and an async wait.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from asgiref.sync import sync_to_async

T = TypeVar("T")

Steps = Generator["Call[Any]", Any, T]
"""A step function's generator: it yields calls, is sent their values, returns a ``T``."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One piece of IO a step function asks for: ``sync`` blocks this thread, ``async_``
    is awaited on the event loop; both give the same ``T``."""

    sync: Callable[[], T]
    async_: Callable[[], Awaitable[T]]

    @classmethod
    def quick(cls, read: Callable[[], T]) -> Call[T]:
        """``read`` as it is on either side: it never waits (fine on an event loop)."""

        async def on_the_loop() -> T:
            return read()

        return cls(read, on_the_loop)

    @classmethod
    def blocking(cls, read: Callable[[], T]) -> Call[T]:
        """``read``, which may wait (on the network, say): in a thread off the event loop."""
        return cls(read, sync_to_async(read, thread_sensitive=False))


class _Outcome:
    """A call's value or its exception, which the step function is resumed with (an
    exception is raised inside it, where it yielded: its ``try`` and ``finally`` see it)."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    @classmethod
    def of(cls, call: Call[Any]) -> _Outcome:
        try:
            return cls(call.sync())
        except BaseException as error:
            return cls(error=error)

    @classmethod
    async def aof(cls, call: Call[Any]) -> _Outcome:
        try:
            return cls(await call.async_())
        except BaseException as error:  # a cancel too
            return cls(error=error)

    def resume(self, steps: Steps[Any]) -> Call[Any] | _Done:
        try:
            return steps.send(self.value) if self.error is None else steps.throw(self.error)
        except StopIteration as done:
            return _Done(done.value)


@dataclass(frozen=True, slots=True)
class _Done:
    value: Any


def run_steps(steps: Steps[T]) -> T:
    """Run ``steps`` on this thread: each call's sync side."""
    step = _Outcome().resume(steps)
    while isinstance(step, Call):
        step = _Outcome.of(step).resume(steps)
    return cast(T, step.value)


async def arun_steps(steps: Steps[T]) -> T:
    """Run ``steps`` on this event loop: each call's async side, awaited."""
    step = _Outcome().resume(steps)
    while isinstance(step, Call):
        step = (await _Outcome.aof(step)).resume(steps)
    return cast(T, step.value)
