"""Helpers of the local pool's unit tests: gates a test opens, jobs, polling on a loop."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import ClassVar

LONG = 5.0  # seconds: "did not hang" answers well within this


class Gate:
    """Holds a job until opened; safe to open from any thread. Every gate a test made is
    opened after it (``_open_gates``), so a failing test leaves no job held."""

    made: ClassVar[list[Gate]] = []

    def __init__(self) -> None:
        self._event = threading.Event()
        Gate.made.append(self)

    def open(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        while not self._event.is_set():
            await asyncio.sleep(0.001)


def job(result, gate=None, started=None):
    async def fn():
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        return result

    return fn


def failing(error, gate=None):
    async def fn():
        if gate is not None:
            await gate.wait()
        raise error

    return fn


async def until(condition, timeout=LONG):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), timeout=30))
