"""What a value must be, said once: a test and its words ("an integer >= 1"). A leaf every
layer imports: the pools and the sandbox check their arguments with the bounds below, and the
settings table (``conf``) uses the same objects, so a setting and its argument agree."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True)
class Bound:
    """A test of a value and what it says, as ``expected`` finishes "... must be"."""

    test: Callable[[Any], bool]
    expected: str

    def __call__(self, value: Any) -> bool:
        return self.test(value)

    def require(self, name: str, value: Any) -> None:
        """ValueError ``"<name> must be <expected>, not <value>"`` unless ``value`` passes."""
        if not self.test(value):
            raise ValueError(f"{name} must be {self.expected}, not {value!r}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool (nor an int too large for a float)."""
    try:
        return (is_int(value) or isinstance(value, float)) and math.isfinite(value)
    except OverflowError:
        return False


def shown(number: float) -> str:
    """A number as the docs write it: whole MiB as ``"128 MiB"``."""
    whole_mib = is_int(number) and number >= MiB and number % MiB == 0
    return f"{number // MiB} MiB" if whole_mib else f"{number}"


LARGEST = 2**53  # the integers JSON readers (the status page's script) and Redis's Lua hold


def integer(low: int, high: int | None = None, *, unit: str = "") -> Bound:
    """An int from ``low`` to ``high`` (``LARGEST``), ``unit`` ("bytes") first in its words."""
    top, words = high, f"an integer from {low} to {high}"
    if top is None:
        top, words = LARGEST, f"an integer >= {shown(low)} and <= 2**53"
    return Bound(lambda v: is_int(v) and low <= v <= top, f"{unit}, {words}" if unit else words)


LONGEST = 10**9  # seconds (31 years) every timer takes: the child's alarm counts to 2**31 - 1


def seconds(*, at_least: float = 0, above: float | None = None) -> Bound:
    """A number of seconds, ``>= at_least`` or ``> above``, up to ``LONGEST``."""
    low, over = (at_least, ">=") if above is None else (above, ">")
    return Bound(
        lambda v: is_number(v) and (low <= v if above is None else low < v) and v <= LONGEST,
        f"seconds {over} {shown(low)} and <= 1e9",
    )


def one_of(choices: Iterable[str]) -> Bound:
    kept = tuple(choices)
    return Bound(lambda v: isinstance(v, str) and v in kept, "one of " + ", ".join(map(repr, kept)))


def or_none(bound: Bound) -> Bound:
    return Bound(lambda v: v is None or bound.test(v), f"{bound.expected}, or None")


FLAG = Bound(lambda v: isinstance(v, bool), "True or False")

# the lower layers' arguments (``Pool``, ``RedisPool``, ``extract``, ``configure``)
SLOTS = integer(1)  # jobs running at once
QUEUE = integer(0)  # jobs waiting for a slot
WAIT = or_none(seconds(at_least=0))  # seconds a queued job waits, then PoolBusy; None: no end
TIMEOUT = seconds(above=0)  # a job's run, in the child
MEMORY_LIMIT = integer(1, unit="bytes")  # of the child's address space
MAX_PAGES = or_none(integer(1))  # pages read at most; None: all
MAX_TEXT_BYTES = integer(1, unit="bytes")  # of text a job returns
CHILD_ENV = Bound(  # variables the children inherit besides the minimum
    lambda v: (
        isinstance(v, list | tuple) and all(isinstance(n, str) and n and "=" not in n for n in v)
    ),
    "a list of environment variable names",
)
NICE = integer(0, 19)  # added to the server's nice for its children: 0, its own
LEASE = seconds(at_least=0.1)  # a silent process keeps its slots and holds this long
NAMESPACE = Bound(  # the keys are "{NAMESPACE}:...": the braces are a Redis hash tag
    lambda v: isinstance(v, str) and v != "" and not set(v) & set("{}"),
    "a non-empty string without braces",
)
FALLBACK = one_of(("refuse", "local"))  # while Redis fails: refuse new calls, or run them here
CALL_TIMEOUT = seconds(above=0)  # a Redis call may take this long before Redis counts as failing
