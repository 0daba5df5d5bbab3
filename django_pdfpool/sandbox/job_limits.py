"""What a job's limits and the sandbox's options must be, declared once: ``extract()`` and
``configure()`` check their arguments with these bounds, and the settings they come from
(TIMEOUT, MAX_PAGES, ENGINE, CHILD_ENV, CHILD_NICE, SANDBOX_REQUIRE) are checked with the
same."""

from __future__ import annotations

from ..bounds import Bound, integer, one_of, or_none, seconds
from .confine import LEVELS
from .wire import ENGINES


def _is_name(name: object) -> bool:
    return isinstance(name, str) and name != "" and "=" not in name


TIMEOUT = seconds(above=0)  # a job's run, in the child
MEMORY_LIMIT = integer(1, unit="bytes")  # of the child's address space
MAX_PAGES = or_none(integer(1))  # pages read at most; None: all
ENGINE = one_of(ENGINES)  # besides engines registered for tests (extract.register_engine)
MAX_TEXT_BYTES = integer(1, unit="bytes")  # of text a job returns
CHILD_ENV = Bound(  # variables the children inherit besides the minimum
    lambda v: isinstance(v, list | tuple) and all(_is_name(n) for n in v),
    "a list of environment variable names",
)
CHILD_NICE = integer(0, 19)  # added to the server's nice for its children: 0, its own
REQUIRE = one_of(LEVELS)  # the sandbox level below which extractions are refused
