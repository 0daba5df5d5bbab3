"""Parent side: the handle on a child process: start it, hand it a job, read its answer, reap it.

Each child is a plain `subprocess.Popen` in its own session (a process group, killed whole).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import site
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .wire import READY, child_options, holds_answer, job_started

CHILD_MODULE = "django_pdfpool.sandbox.child_main"
SLOW = 0.05  # seconds into a job after which its replacement spare starts anyway
READ_CHUNK = 1 << 20
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class Outcome:
    """How a conversation with a child ended, for extract.py to judge."""

    output: bytes | bytearray  # decode_answer empties a bytearray
    returncode: int | None
    timed_out: bool = False  # killed by us at the deadline
    overflow: bool = False  # killed by us: more output than allowed
    lost: bool = False  # the job could not be handed over: the child was already gone
    complete: bool = False  # a whole answer line arrived (the child is exiting, not yet reaped)
    started: bool = False  # the child said it had read the job


class Child:
    """One child process: the job is sent once, the answer read once, the group killed once."""

    def __init__(
        self,
        python: str,
        preload: tuple[str, ...] = (),
        warm_up: bool = False,
        env: tuple[str, ...] = (),
    ) -> None:
        # -P: the cwd does not go on sys.path. stderr goes nowhere: pypdf can log thousands of
        # lines, and a full pipe would hang the child.
        self.proc = subprocess.Popen(
            [python, "-P", "-m", CHILD_MODULE, *child_options(preload, warm_up)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
            env=child_env(env),
            bufsize=0,
        )
        self.pid = self.proc.pid
        self.owner = os.getpid()
        self._lock = threading.Lock()  # kill vs reap: never signal a reaped (reusable) pid
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None
        with _live_lock:
            _live.add(self)

    def wait_ready(self, timeout: float) -> bool:
        """Read the child's "ready" line: its imports are done and it waits for a job."""
        deadline, line, fd = time.monotonic() + timeout, b"", self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while len(line) < len(READY):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000 + 1):
                return False
            chunk = os.read(fd, len(READY) - len(line))
            if not chunk:
                return False
            line += chunk
        return line == READY

    def alive(self) -> bool:
        """Whether the child has not exited yet."""
        with self._lock:
            return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the child's whole process group, unless it was already reaped."""
        with self._lock:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)

    def reap(self) -> int:
        """Wait for the (exiting or killed) child and release its pipes."""
        with self._lock:
            returncode = self.proc.wait()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        with _live_lock:
            _live.discard(self)
        return returncode

    def disown(self) -> None:
        """In a forked process: let go of the parent's child without signalling it."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.proc.returncode = 0  # not ours to wait for

    def send(self, job_line: bytes) -> bool:
        """Hand the job over; False if the child is gone already (it never saw the job)."""
        try:
            os.write(self.proc.stdin.fileno(), job_line)  # a few hundred bytes: never blocks
            self.proc.stdin.close()
            return True
        except (BrokenPipeError, ValueError, OSError):
            return False

    def receive(
        self, deadline: float, max_output: int, meanwhile: Callable[[], None] | None = None
    ) -> Outcome:
        """Read until a whole answer, EOF, the deadline or too much output (the last two kill);
        `meanwhile()` runs once if the answer takes over SLOW seconds. Reaps nothing."""
        output, fd = bytearray(), self.proc.stdout.fileno()
        timed_out = overflow = False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        slow = time.monotonic() + SLOW
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                timed_out = True
                break
            if meanwhile is not None and now >= slow:
                meanwhile()
                meanwhile = None
            wait = remaining if meanwhile is None else min(remaining, slow - now)
            if not poller.poll(wait * 1000 + 1):
                continue
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError:  # closed under us (kill_all at exit): as good as EOF
                chunk = b""
            if not chunk:
                break
            output += chunk
            if len(output) > max_output:
                overflow = True
                break
            if holds_answer(output):  # handed on as it is: no copy
                return Outcome(output, None, complete=True, started=True)
        if timed_out or overflow:
            self.kill()
        started = job_started(output)
        return Outcome(output, None, timed_out=timed_out, overflow=overflow, started=started)

    def finish(self, deadline: float) -> int:
        """Wait for the child's exit (killing it if it outlives the deadline) and reap it."""
        if not self._exits_by(deadline):
            self.kill()
        return self.reap()

    def _exits_by(self, deadline: float) -> bool:
        """After EOF the child is exiting: wait for that without reaping, up to the deadline."""
        while True:
            remaining = deadline - time.monotonic()
            if self._pidfd is not None:
                poller = select.poll()
                poller.register(self._pidfd, select.POLLIN)
                return bool(poller.poll(max(0.0, remaining) * 1000 + 1))
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, self.pid, flags) is not None:
                return True
            if remaining <= 0:
                return False
            time.sleep(0.001)


# What the interpreter needs to start and find its packages, and the locale it decodes paths
# in; every LC_* variable too. Nothing else of the parent's environment reaches a child.
BASE_ENV = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LD_LIBRARY_PATH",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
)


def child_env(names: tuple[str, ...] = ()) -> dict[str, str]:
    """The child's environment: BASE_ENV, LC_*, and `names`, where set; with this package
    importable: a checkout goes on PYTHONPATH, a site-packages directory never (it would go
    before the standard library)."""
    wanted = {*BASE_ENV, *names}
    env = {k: v for k, v in os.environ.items() if k in wanted or k.startswith("LC_")}
    if _PACKAGE_ROOT not in {*site.getsitepackages(), site.getusersitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


_live: set[Child] = set()  # every unreaped child, killed at exit
_live_lock = threading.Lock()


class JobRun:
    """One job's child, shared by the awaiting coroutine (which may cancel) and its thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: Child | None = None
        self.cancelled = False

    def run(
        self,
        start: Callable[[], Child],
        job_line: bytes,
        deadline: float,
        max_output: int,
        deliver: Callable[[Outcome], None],
        refill: Callable[[], None],
    ) -> None:
        """In a worker thread: a child from `start()` takes the job (a second one if the first
        was gone), its answer goes to `deliver`, then `refill()` runs. Reaps the child."""
        outcome = Outcome(b"", None, lost=True)
        for _attempt in range(2):
            if self.cancelled:
                break
            try:
                child = start()
            except OSError:  # no process to be had (EAGAIN, ENOMEM): the job is lost
                break
            with self._lock:
                self._child = child
                if self.cancelled:
                    child.kill()
            try:
                if not child.send(job_line):
                    child.kill()
                    child.reap()
                    continue
                outcome = child.receive(deadline, max_output, refill)
            except BaseException:
                child.kill()
                child.reap()
                raise
            if outcome.complete and not self.cancelled:
                deliver(outcome)  # before the reaping: the caller skips the child's teardown
                refill()
                child.finish(deadline)
                return
            # Every other ending: the child is reaped, then the outcome delivered.
            outcome.returncode = child.finish(deadline)
            if outcome.started or outcome.timed_out or outcome.overflow:
                break
            outcome.lost = True  # died before it read the job (e.g. a spare killed just now)
        deliver(outcome)
        refill()

    def cancel(self) -> None:
        """Kill the job's child (now, or as soon as it exists); its thread then reaps it."""
        with self._lock:
            self.cancelled = True
            if self._child is not None:
                self._child.kill()


def drop(child: Child) -> None:
    """End a child that has no job (kill its group, reap it)."""
    child.kill()
    child.reap()


def kill_all() -> None:
    """Kill and reap every child this process still has (at exit)."""
    with _live_lock:
        children = [child for child in _live if child.owner == os.getpid()]
    for child in children:
        drop(child)


def _forget_after_fork() -> None:
    """In a forked process the children are the parent's: forget them, signal none."""
    global _live_lock
    _live_lock = threading.Lock()
    _live.clear()


atexit.register(kill_all)
os.register_at_fork(after_in_child=_forget_after_fork)
