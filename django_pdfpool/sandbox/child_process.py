"""Parent side: the handle on a job's process: start it, hand it a job, read its answer, reap it.

Each child is in its own process group (killed whole), in the server's session: a `Child` is our own
`subprocess.Popen`; a child forked by the template is a `template.ForkedChild`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import select
import signal
import site
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .wire import DEFAULT_NICE, READY, child_options, holds_answer, job_started

CHILD_MODULE = "django_pdfpool.sandbox.child_main"
READ_CHUNK = 1 << 20
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

COLD, FORKED = "cold", "forked"  # how a child started: a new interpreter, or the template


@dataclass
class Outcome:
    """How a conversation with a child ended, for extract.py to judge."""

    output: bytes | bytearray  # decode_answer empties a bytearray
    returncode: int | None  # None: not known (a forked child whose template died first)
    timed_out: bool = False  # killed by us at the deadline
    overflow: bool = False  # killed by us: more output than allowed
    lost: bool = False  # the job could not be handed over: the child was already gone
    complete: bool = False  # a whole answer line arrived (the child is exiting, not yet reaped)
    started: bool = False  # the child said it had read the job
    start: str = COLD  # how the child that answered started: COLD or FORKED


class Handle:
    """A job's process as the parent sees it: job pipe, answer pipe and pidfd. Subclasses
    say how it is killed and reaped (`Child`: our own; `template.ForkedChild`: forked)."""

    start = COLD
    pid: int
    owner: int
    _job_fd: int | None
    _answer_fd: int
    _pidfd: int | None

    def __init__(self) -> None:
        self.owner = os.getpid()
        self._lock = threading.Lock()  # kill vs reap: never signal a reaped (reusable) pid
        with _live_lock:
            _live.add(self)

    def alive(self) -> bool:
        """Whether the child has not exited yet."""
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL to the child's whole process group, unless it was already reaped."""
        raise NotImplementedError

    def reap(self) -> int | None:
        """Wait for the (exiting or killed) child, release its pipes; its exit code."""
        raise NotImplementedError

    def disown(self) -> None:
        """In a forked process: let go of the parent's child without signalling it."""
        raise NotImplementedError

    def _close_job_pipe(self) -> None:
        if self._job_fd is not None:
            os.close(self._job_fd)
            self._job_fd = None

    def _forget(self) -> None:
        with _live_lock:
            _live.discard(self)

    def send(self, job_line: bytes) -> bool:
        """Hand the job over; False if the child is gone already (it never saw the job)."""
        try:
            if self._job_fd is None:
                return False
            os.write(self._job_fd, job_line)  # a few hundred bytes: never blocks
            return True
        except OSError:
            return False
        finally:
            self._close_job_pipe()

    def receive(self, deadline: float, max_output: int) -> Outcome:
        """Read until a whole answer, EOF, the deadline or too much output (the last two
        kill). Reaps nothing."""
        output, fd = bytearray(), self._answer_fd
        timed_out = overflow = False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not poller.poll(remaining * 1000 + 1):
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
                return Outcome(output, None, complete=True, started=True, start=self.start)
        if timed_out or overflow:
            self.kill()
        started = job_started(output)
        return Outcome(
            output, None, timed_out=timed_out, overflow=overflow, started=started, start=self.start
        )

    def finish(self, deadline: float) -> int | None:
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


class Child(Handle):
    """A child process of ours (`subprocess.Popen`, its own process group): a cold job's child,
    or (`template=` its control socket, `ready=` its ready children) the template."""

    start = COLD

    def __init__(
        self,
        python: str,
        preload: tuple[str, ...] = (),
        warm_up: bool = False,
        env: tuple[str, ...] = (),
        template: int | None = None,
        ready: tuple[int, float] = (0, 0.0),
        sandbox: str = "none",
        nice: int = DEFAULT_NICE,
    ) -> None:
        # -P: the cwd does not go on sys.path. stderr goes nowhere: pypdf can log thousands of
        # lines, and a full pipe would hang the child.
        options = child_options(
            preload,
            warm_up,
            template=template is not None,
            parent=os.getpid(),
            ready=ready,
            sandbox=sandbox,
            nice=nice,
        )
        self.proc = subprocess.Popen(
            [python, "-P", "-m", CHILD_MODULE, *options],
            stdin=subprocess.PIPE if template is None else template,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            process_group=0,  # the server's session: see child_main (its nice)
            env=child_env(env),
            bufsize=0,
        )
        self.pid = self.proc.pid
        self._job_fd = None if self.proc.stdin is None else self.proc.stdin.fileno()
        assert self.proc.stdout is not None  # stdout=PIPE
        self._answer_fd = self.proc.stdout.fileno()
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None
        super().__init__()

    def wait_ready(self, timeout: float) -> bool:
        """Read the child's "ready" line: its imports are done and it waits for a job."""
        deadline, line, fd = time.monotonic() + timeout, b"", self._answer_fd
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
        self._close_pipes()
        self._forget()
        return returncode

    def _close_job_pipe(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self._job_fd = None

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        self._job_fd = None

    def disown(self) -> None:
        """In a forked process: let go of the parent's child without signalling it."""
        self._close_pipes()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.proc.returncode = 0  # not ours to wait for


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


_live: set[Handle] = set()  # every unreaped child, killed at exit
_live_lock = threading.Lock()


class JobRun:
    """One job's child, shared by the awaiting coroutine (which may cancel) and its thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: Handle | None = None
        self.cancelled = False

    def run(
        self,
        start: Callable[[], Handle],
        job_line: bytes,
        deadline: float,
        max_output: int,
        deliver: Callable[[Outcome], None],
    ) -> None:
        """In a worker thread: a child from `start()` takes the job (a second one if the first
        was gone), its answer goes to `deliver`. Reaps the child."""
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
                outcome = child.receive(deadline, max_output)
            except BaseException:
                child.kill()
                child.reap()
                raise
            if outcome.complete and not self.cancelled:
                deliver(outcome)  # before the reaping: the caller skips the child's teardown
                child.finish(deadline)
                return
            # Every other ending: the child is reaped, then the outcome delivered.
            outcome.returncode = child.finish(deadline)
            if outcome.started or outcome.timed_out or outcome.overflow:
                break
            outcome.lost = True  # died before it read the job (e.g. killed just now)
        deliver(outcome)

    def cancel(self) -> None:
        """Kill the job's child (now, or as soon as it exists); its thread then reaps it."""
        with self._lock:
            self.cancelled = True
            if self._child is not None:
                self._child.kill()


class _Starter:
    """``start_thread``: a job's worker thread started off the caller's loop (issue 24)."""

    def __init__(self) -> None:  # and again in a forked child
        self._lock, self._running = threading.Lock(), False
        self._queue: queue.SimpleQueue[tuple[threading.Thread, Future[Any]]] = queue.SimpleQueue()

    def start(self, thread: threading.Thread, future: Future[Any]) -> None:
        with self._lock:  # Thread.start() waits until the new thread runs: not on a loop
            if not self._running:  # once per process: this start waits, no other does
                threading.Thread(target=self._serve, daemon=True, name="pdfpool-starter").start()
                self._running = True
            self._queue.put((thread, future))

    def _serve(self) -> None:
        while True:
            thread, future = self._queue.get()
            try:
                thread.start()
            except BaseException as exc:  # no thread to be had: the job fails, nobody hangs
                if future.set_running_or_notify_cancel():
                    future.set_exception(exc)


_starter = _Starter()
start_thread = _starter.start
os.register_at_fork(after_in_child=lambda: _Starter.__init__(_starter))


def drop(child: Handle) -> None:
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
