"""Events about jobs, from a script's reply or this process's channel, sent where they
belong; one about a job whose admission has no reply yet waits in the table for it."""

from __future__ import annotations

from .calls import ScriptCalls
from .lifecycle import JobLifecycle
from .link import Link
from .records import Background
from .scripts import Event
from .table import JobTable


class EventRouter:
    """Acts on ``start``, ``done`` and the endings (see ``scripts.Event``). Job loop only."""

    def __init__(
        self,
        table: JobTable,
        lifecycle: JobLifecycle,
        calls: ScriptCalls,
        link: Link,
        tasks: Background,
    ) -> None:
        self._table, self._lifecycle, self._calls = table, lifecycle, calls
        self._link, self._tasks = link, tasks

    def handle(self, events: list[Event]) -> None:
        for event in events:
            self.on_event(event)

    def on_event(self, event: Event) -> None:
        job = self._table.get(event.job_id)
        if job is None or (not job.owned and event.job_id in self._table.pending):
            if self._table.admissions:  # its admission's reply may still be on its way
                self._table.hold(event)
            elif job is None:
                self.unclaimed(event)
            return
        if event.kind == "start":
            if job.owned and job.state == "queued":
                self._lifecycle.start(job)
        elif event.kind == "done":
            if not job.owned:
                self._tasks.spawn(self._lifecycle.collect(job))
        else:
            self._lifecycle.end(job, event.kind)

    def replay(self, events: list[Event]) -> None:
        """Events no admission claimed: act on those of known jobs, the rest are unclaimed."""
        for event in events:
            if self._table.get(event.job_id) is not None:
                self.on_event(event)
            else:
                self.unclaimed(event)

    def unclaimed(self, event: Event) -> None:
        """An event about a job this process no longer knows."""
        if event.kind == "done":  # nobody here waits any more: take our copy off the shelf
            self._tasks.quietly(self._link.collect(event.job_id))
        elif event.kind == "start":  # ours, left from a call whose reply was lost: free it
            self._tasks.spawn(self._calls.drop(event.key, event.job_id, "lost"))
