"""Parent side: warm spares, children started ahead of time so that a job skips start-up.

A spare sets its limits only when its job arrives, so one spare fits any job.
"""

from __future__ import annotations

import os
import sys
import threading

from .child_process import Child, drop

START_TIMEOUT = 30.0  # seconds a spare may take to get ready before it is given up


class WarmChildren:
    """Up to `spares` started, warmed-up children waiting for a job, and the interpreter they
    run on; started lazily, replaced in background threads once taken or dead."""

    def __init__(self, spares: int = 1) -> None:
        if spares < 0:
            raise ValueError("spares must be >= 0")
        self.spares = spares
        self.python = sys.executable
        self.env: tuple[str, ...] = ()  # names of variables children get besides the minimum
        self._ready: list[Child] = []
        self._starting = 0
        self._preload: set[str] = set()  # engines beyond pypdf that jobs have asked for
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def take(self, engine: str) -> Child:
        """A child for one job with `engine`: a live spare if there is one, else a new child."""
        with self._lock:
            if engine != "pypdf":
                self._preload.add(engine)
            found = None
            while self._ready and found is None:
                child = self._ready.pop()
                if child.alive():
                    found = child
                else:
                    drop(child)  # died while waiting: reaped here, replaced by refill()
        if found is not None:
            return found
        return self.start_cold(engine)

    def start_cold(self, engine: str) -> Child:
        """A new child for one job with `engine` (every child imports pypdf at start-up)."""
        return Child(self.python, preload=(engine,) if engine != "pypdf" else (), env=self.env)

    def prewarm(self) -> None:
        """Start the spares now rather than on the first job."""
        self.refill()

    def pids(self) -> list[int]:
        """Process ids of the spares currently waiting (for tests and monitoring)."""
        with self._lock:
            return [child.pid for child in self._ready]

    def resize(self, spares: int) -> None:
        """Keep at most `spares` spares from now on (0 turns them off and ends them)."""
        if spares < 0:
            raise ValueError("spares must be >= 0")
        with self._lock:
            self.spares = spares
            extra, self._ready = self._ready[spares:], self._ready[:spares]
        for child in extra:
            drop(child)

    def shutdown(self) -> None:
        """End every spare now; spares start again only after `resize()`."""
        self.resize(0)

    def refill(self) -> None:
        """Start the missing spares, each in a background thread."""
        with self._lock:
            wanted = self.spares - len(self._ready) - self._starting
            if wanted <= 0:
                return
            self._starting += wanted
            preload = tuple(sorted(self._preload))
        for _ in range(wanted):
            threading.Thread(
                target=self._start_one, args=(preload,), daemon=True, name="pdfpool-spare"
            ).start()

    def _start_one(self, preload: tuple[str, ...]) -> None:
        """In a background thread: start a spare, wait for its READY, keep it if still wanted."""
        env = self.env
        try:
            child: Child | None = Child(self.python, preload=preload, warm_up=True, env=env)
        except OSError:
            child = None
        if child is not None and not child.wait_ready(START_TIMEOUT):
            drop(child)
            child = None
        with self._lock:
            self._starting -= 1
            keep = child is not None and len(self._ready) < self.spares and env == self.env
            if keep:
                self._ready.append(child)
        if child is not None and not keep:
            drop(child)
            if env != self.env:  # started before configure() changed the environment
                self.refill()

    def _after_fork(self) -> None:
        """In a forked process the spares belong to the parent: forget them, kill nothing."""
        self._lock = threading.Lock()
        self._starting = 0
        for child in self._ready:
            child.disown()
        self._ready = []
