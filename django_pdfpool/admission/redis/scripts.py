"""The Lua scripts behind ``RedisPool`` (package files in ``lua/``, read once at import) and
the reply of each as a named structure. Every change of shared state is one script, run
atomically in Redis: the rules hold across processes without any lock of ours."""

from __future__ import annotations

from importlib.resources import files
from typing import Any, NamedTuple

MUTATING = ("admit", "leave", "finish", "expire", "drop", "beat", "unregister", "refused")
READING = ("collect", "view", "pressure", "probe")


def _read(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


_PRELUDE = _read("prelude")
SOURCES: dict[str, str] = {
    **{name: _PRELUDE + _read(name) for name in MUTATING},  # each after the shared prelude
    **{name: _read(name) for name in READING},
}


class Event(NamedTuple):
    """What a script tells a process about one job: ``start`` (it took a slot), ``done``
    (its outcome waits in Redis), ``busy`` (waited longer than ``wait``), ``lost`` (its
    owner's lease ended), ``dropped`` (every waiter left a queued job), ``closed``."""

    kind: str
    key: str
    job_id: str


def events_of(flat: list[str]) -> list[Event]:
    """The events a script returns for the calling process: ``[kind, key, id, ...]``."""
    return [Event(*flat[i : i + 3]) for i in range(0, len(flat), 3)]


class AdmitReply(NamedTuple):
    """``admit.lua``'s answer. ``status``: ``joined`` (``job_id``, ``state``, ``owner`` are
    the shared job's), ``started``/``queued`` (this call's job), ``caller`` (the caller's
    held job, ``age`` seconds since it queued or started), ``busy``, ``nojob``, or
    ``mismatch`` (``differs``: each term this process does not share, with the namespace's)."""

    status: str
    job_id: str
    state: str
    owner: str
    age: float
    queued: int  # jobs in the queue when the script ran
    events: list[Event]
    differs: dict[str, str] = {}  # noqa: RUF012 - never mutated; mismatch only

    @classmethod
    def of(cls, reply: Any) -> AdmitReply:
        status, job_id, state, owner, age_ms, queued, events, *rest = reply
        flat = rest[0] if rest else []
        differs = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        age = int(age_ms) / 1000
        return cls(status, job_id, state, owner, age, int(queued), events_of(events), differs)


class StatusReply(NamedTuple):
    """``leave.lua``'s and ``finish.lua``'s answer: ``ok``, ``gone`` (the job is not in
    Redis any more) or, from finish, ``need`` (send the outcome: sharers elsewhere wait)."""

    status: str
    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> StatusReply:
        return cls(reply[0], events_of(reply[1]))


class ExpireReply(NamedTuple):
    """``expire.lua``'s answer: seconds left before the job's deadline (negative: it is not
    queued with one; 0: it expired now)."""

    left: float
    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> ExpireReply:
        return cls(int(reply[0]) / 1000, events_of(reply[1]))


class EventsReply(NamedTuple):
    """``drop.lua``'s and ``unregister.lua``'s answer: only events."""

    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> EventsReply:
        return cls(events_of(reply[0]))


class PressureReply(NamedTuple):
    """``pressure.lua``'s answer: the cluster's running and queued jobs, whether the key's
    job is in flight, and whether the caller is busy with another (its held job's state,
    seconds since it queued or started, and jobs ahead of it)."""

    running: int
    queued: int
    in_flight: bool
    caller_busy: bool
    state: str
    age: float
    ahead: int

    @classmethod
    def of(cls, reply: Any) -> PressureReply:
        running, queued, in_flight, busy, state, age_ms, ahead = reply
        return cls(
            int(running), int(queued), bool(in_flight), bool(busy), str(state),
            int(age_ms) / 1000, int(ahead),
        )  # fmt: skip


class JobReport(NamedTuple):
    """One job as the beat found it: ``queued``, ``running``, ``gone`` or ``done`` (with
    ``data``, the outcome an awaited job left for this process)."""

    state: str
    data: str


class BeatReply(NamedTuple):
    """``beat.lua``'s answer: when the next other lease ends (seconds; None: no other
    process), one report per job sent, in order, and events."""

    next_lease_end: float | None
    reports: list[JobReport]
    events: list[Event]

    @classmethod
    def of(cls, reply: Any) -> BeatReply:
        next_ms, flat, events = reply
        reports = [JobReport(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        ends = None if int(next_ms) < 0 else int(next_ms) / 1000
        return cls(ends, reports, events_of(events))
