"""What the Redis pool's options must be, declared once and without redis-py: ``RedisPool``
checks its arguments with these bounds and the settings it is built from are checked with them."""

from __future__ import annotations

from ...bounds import Bound, one_of, seconds
from .modes import FALLBACKS

LEASE = seconds(at_least=0.1)  # a silent process keeps its slots and holds this long
NAMESPACE = Bound(  # the keys are "{NAMESPACE}:...": the braces are a Redis hash tag
    lambda v: isinstance(v, str) and v != "" and not set(v) & set("{}"),
    "a non-empty string without braces",
)
FALLBACK = one_of(FALLBACKS)  # while Redis fails
CALL_TIMEOUT = seconds(above=0)  # a Redis call may take this long before Redis counts as failing
