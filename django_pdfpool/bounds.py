"""What a value must be, said once: a test and the words for it ("an integer >= 1").

A leaf every layer may import, like ``exceptions``: each layer declares the bounds of its
own arguments here once (``admission.pool_limits``, ``admission.redis.options``,
``sandbox.job_limits``), checks its arguments with them, and the settings table
(``conf.PoolSettings``) refers to the same objects, so a setting and the argument it
becomes can never be checked differently.
"""

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
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool (NaN and infinity are refused)."""
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


def shown(number: float) -> str:
    """A number as the docs write it: whole MiB as ``"128 MiB"``."""
    whole_mib = is_int(number) and number >= MiB and number % MiB == 0
    return f"{number // MiB} MiB" if whole_mib else f"{number}"


def integer(low: int, high: int | None = None, *, unit: str = "") -> Bound:
    """An int from ``low`` (to ``high``); ``unit`` ("bytes") comes first in the words."""
    words = f"an integer >= {shown(low)}" if high is None else f"an integer from {low} to {high}"
    return Bound(
        lambda v: is_int(v) and v >= low and (high is None or v <= high),
        f"{unit}, {words}" if unit else words,
    )


def seconds(*, at_least: float | None = None, above: float | None = None) -> Bound:
    """A finite number of seconds, ``>= at_least`` or ``> above``."""
    if above is not None:
        return Bound(lambda v: is_number(v) and v > above, f"seconds > {shown(above)}")
    assert at_least is not None
    return Bound(lambda v: is_number(v) and v >= at_least, f"seconds >= {shown(at_least)}")


def one_of(choices: Iterable[str]) -> Bound:
    """One of ``choices`` (kept in their order for the words)."""
    kept = tuple(choices)
    return Bound(lambda v: isinstance(v, str) and v in kept, "one of " + ", ".join(map(repr, kept)))


def or_none(bound: Bound) -> Bound:
    """``bound``, or None."""
    return Bound(lambda v: v is None or bound.test(v), f"{bound.expected}, or None")


FLAG = Bound(lambda v: isinstance(v, bool), "True or False")
