"""Parent side: the template, one warmed-up process that forks each job's child on request.

A supervisor thread starts it, restarts it when it dies and ends it; while there is none,
jobs start cold children. At most this one process is idle, whatever the slots.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass

from .child_process import FORKED, Child, Handle, drop
from .template_main import FORK_REQUEST, PID_FORMAT, PIDS_REQUEST, STATUS_FORMAT
from .wire import DEFAULT_NICE

START_TIMEOUT = 30.0  # seconds a template may take to get ready before it is given up
FORK_TIMEOUT = 5.0  # seconds for its answer to a fork request before it is given up
STATUS_TIMEOUT = 5.0  # seconds for the exit status of a child that has exited
STEADY = 5.0  # a template that lived this long was healthy: restart it at once
MAX_READY = 4  # ready children a template keeps at most (as many as jobs ran at once lately)
READY_IDLE = 5.0  # seconds without a job after which the ready children exit
SUPPORTED = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


@dataclass(frozen=True)
class ChildStarts:
    """How this process's extraction children started, and its template (status page)."""

    forked: int  # children forked from the template
    cold: int  # children started as a new interpreter (no template, or warm=False)
    template_pid: int | None  # the running template, None while there is none
    template_starts: int  # templates started so far: more than one means restarts
    enabled: bool  # whether a template is wanted (``configure(warm=)``)
    ready: int = 0  # the template's ready children (forked and warmed up ahead of jobs)


class ForkedChild(Handle):
    """A job's child forked by the template: killed through its pidfd (which no other
    process can take over), reaped by the template, which reports its exit status."""

    start = FORKED

    def __init__(self, pid: int, pidfd: int, job_fd: int, answer_fd: int, status_fd: int) -> None:
        self.pid, self._pidfd = pid, pidfd
        self._job_fd, self._answer_fd, self._status_fd = job_fd, answer_fd, status_fd
        self._reaped = False
        super().__init__()

    def _exited(self) -> bool:
        return bool(self._pidfd is None or select.select([self._pidfd], [], [], 0)[0])

    def alive(self) -> bool:
        """Whether the child has not exited yet."""
        with self._lock:
            return not self._reaped and not self._exited()

    def kill(self) -> None:
        """SIGKILL to the child (by pidfd) and, while it runs, to its process group."""
        with self._lock:
            if self._reaped or self._pidfd is None:
                return
            running = not self._exited()  # then its pid and group id are its own
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            if running:
                with contextlib.suppress(OSError):  # no group before the child's setpgid()
                    os.killpg(self.pid, signal.SIGKILL)

    def reap(self) -> int | None:
        """Wait for its exit, then for the status the template reaps it with (None if the
        template died first); release every descriptor."""
        with self._lock:
            if self._reaped:
                return None
            if self._pidfd is not None:
                select.select([self._pidfd], [], [])
            ready = select.select([self._status_fd], [], [], STATUS_TIMEOUT)[0]
            status = os.read(self._status_fd, 4) if ready else b""
            self._release()
        self._forget()
        return struct.unpack(STATUS_FORMAT, status)[0] if len(status) == 4 else None

    def disown(self) -> None:
        """In a forked process: let go of the parent's child without signalling it."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        self._close_job_pipe()
        for fd in (self._answer_fd, self._status_fd, self._pidfd):
            if fd is not None:
                os.close(fd)
        self._pidfd, self._reaped = None, True


class _Running:
    """A ready template: its process and our end of its control socket."""

    def __init__(self, child: Child, control: socket.socket) -> None:
        self.child, self.control = child, control
        self.retired = False  # ended by us: not counted as a failure
        self.lock = threading.Lock()  # one request at a time on the socket

    def fork(self) -> ForkedChild | None:
        """A child from the template (a ready one if it has one), or None if the template did
        not answer."""
        try:
            with self.lock:
                self.control.send(FORK_REQUEST)
                reply, fds, _, _ = socket.recv_fds(self.control, 16, 4, socket.MSG_CMSG_CLOEXEC)
        except OSError:  # gone, or too slow (a timeout): not to be asked again
            reply, fds = b"", []
        if len(reply) != struct.calcsize(PID_FORMAT) or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return None
        (pid,) = struct.unpack(PID_FORMAT, reply)
        return ForkedChild(pid, *fds)

    def ready_pids(self) -> list[int]:
        """The pids of the template's ready children ([] if it does not answer)."""
        try:
            with self.lock:
                self.control.send(PIDS_REQUEST)
                reply = self.control.recv(4 * 64)
        except OSError:
            return []
        return [pid for (pid,) in struct.iter_unpack(PID_FORMAT, reply)] if reply != b"-" else []

    def close(self) -> None:
        """End the template (its running children go on) and reap it."""
        self.control.close()
        drop(self.child)


class Template:
    """The process's template and the interpreter, environment and engines it starts with;
    counts how children started. `child()` is what a job calls."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.python = sys.executable
        self.env: tuple[str, ...] = ()  # names of variables children get besides the minimum
        self.preload: tuple[str, ...] = ()  # engines beyond pypdf that jobs have asked for
        self.sandbox = "none"  # the level children must reach (confine.LEVELS), or "off"
        self.nice = DEFAULT_NICE  # the children's nice above the server's (bounds.NICE)
        self.max_ready, self.ready_idle = MAX_READY, READY_IDLE  # read when a template starts
        self._reset()
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self.shutdown)  # before child_process's kill_all: no restart then

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._running: _Running | None = None
        self._thread: threading.Thread | None = None
        self._wake_in, self._wake_out = os.pipe()
        os.set_blocking(self._wake_in, False)
        os.set_blocking(self._wake_out, False)
        self._forked = self._cold = self._starts = 0

    def child(self, engine: str, warm: bool = True) -> Handle:
        """A child for one job with `engine`: forked from the template if `warm` and one is
        ready, else a new interpreter (which also has the template started or restarted)."""
        if warm:
            running = self._wanted(engine)
            forked = running.fork() if running is not None else None
            if forked is not None:
                with self._lock:
                    self._forked += 1
                return forked
            if running is not None:  # it did not answer: replaced, and this job goes cold
                self._retire(running)
        with self._lock:
            self._cold += 1
        preload = (engine,) if engine != "pypdf" else ()
        return Child(
            self.python, preload=preload, env=self.env, sandbox=self.sandbox, nice=self.nice
        )

    def configure(
        self,
        *,
        enabled: bool | None = None,
        python: str | None = None,
        env: tuple[str, ...] | None = None,
        sandbox: str | None = None,
        nice: int | None = None,
    ) -> None:
        """Change what templates start with (the running one is replaced), or turn them off."""
        with self._lock:
            python, env = python or self.python, self.env if env is None else env
            sandbox, nice = sandbox or self.sandbox, self.nice if nice is None else nice
            was = (self.python, self.env, self.sandbox, self.nice)
            changed = (python, env, sandbox, nice) != was
            self.python, self.env, self.sandbox, self.nice = python, env, sandbox, nice
            if enabled is not None:
                changed = changed or enabled != self.enabled
                self.enabled = enabled
            running = self._running if changed else None
        if running is not None:
            self._retire(running, end=True)  # none of the old kind is left on return
        self._wake()

    def prewarm(self) -> None:
        """Start the template now rather than at the first job."""
        with self._lock:
            self._ensure_thread()

    def shutdown(self) -> None:
        """End the template now; `configure(enabled=True)` has one start again."""
        with self._lock:
            self.enabled, running = False, self._running
        if running is not None:
            self._retire(running, end=True)
        self._wake()

    def pid(self) -> int | None:
        """The running template's pid, or None."""
        with self._lock:
            return None if self._running is None else self._running.child.pid

    def idle_pids(self) -> list[int]:
        """The running template's pid and its ready children's ([] while there is none)."""
        with self._lock:
            running = self._running
        return [] if running is None else [running.child.pid, *running.ready_pids()]

    def status(self) -> ChildStarts:
        """Counts of forked and cold starts, the template and its ready children."""
        with self._lock:
            running = self._running
            pid = None if running is None else running.child.pid
            counts = (self._forked, self._cold, pid, self._starts, self.enabled)
        ready = 0 if running is None else len(running.ready_pids())
        return ChildStarts(*counts, ready=ready)

    def _wanted(self, engine: str) -> _Running | None:
        """The running template for a job with `engine` (None: none ready, or it lacks the
        engine and is being replaced by one that has it)."""
        with self._lock:
            running = self._running
            if engine != "pypdf" and engine not in self.preload:
                self.preload = tuple(sorted({*self.preload, engine}))
            elif running is not None:
                return running
            self._ensure_thread()
        if running is not None:
            self._retire(running)
        return None

    def _ensure_thread(self) -> None:
        """Under the lock: start the supervisor if templates are wanted and none runs."""
        if SUPPORTED and self.enabled and self._thread is None:
            self._thread = threading.Thread(
                target=self._supervise, daemon=True, name="pdfpool-template"
            )
            self._thread.start()

    def _retire(self, running: _Running, end: bool = False) -> None:
        """Stop handing out `running`; the supervisor ends it (now, if `end`) and starts
        another if templates are still wanted."""
        with self._lock:
            running.retired = True
            if self._running is running:
                self._running = None
        self._wake()
        if end:
            running.close()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_out, b"!")

    def _sleep(self, seconds: float | None, pidfd: int | None = None) -> None:
        """Until `seconds` pass, `pidfd`'s process exits, or `_wake()`; then drain the wakes."""
        watched = [self._wake_in] if pidfd is None else [self._wake_in, pidfd]
        select.select(watched, [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_in, 4096)

    def _supervise(self) -> None:
        """The supervisor thread (the templates' parent: they die with it): start a
        template, wait for its death or a change, reap it; again until turned off."""
        failures = 0
        while True:
            with self._lock:
                if not self.enabled:
                    self._thread = None
                    return
                spec = self._spec()
            running, born, died = self._launch(*spec), time.monotonic(), True
            if running is not None:
                with self._lock:
                    current = self.enabled and spec == self._spec()
                    if current:
                        self._running, self._starts = running, self._starts + 1
                while current and running.child.alive():  # until it dies, or a change
                    self._sleep(None, running.child._pidfd)
                    with self._lock:
                        current = self._running is running
                died = not running.retired and not running.child.alive()  # by itself
                self._retire(running)
                running.close()
            young = died and (running is None or time.monotonic() - born < STEADY)
            failures = failures + 1 if young else 0
            if failures > 1:  # failed young twice running: back off, up to 30 s
                self._sleep(min(30.0, 0.25 * 2**failures))

    def _spec(self) -> tuple[str, tuple[str, ...], tuple[str, ...], str, int]:
        """What a template starts with, as ``_launch`` takes it (read under ``_lock``)."""
        return self.python, self.env, self.preload, self.sandbox, self.nice

    def _launch(
        self, python: str, env: tuple[str, ...], preload: tuple[str, ...], sandbox: str, nice: int
    ) -> _Running | None:
        """A ready template, or None if it could not start or get ready in time."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            ready = (self.max_ready, self.ready_idle)
            child = Child(
                python,
                preload=preload,
                env=env,
                template=theirs.fileno(),
                ready=ready,
                sandbox=sandbox,
                nice=nice,
            )
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        if not child.wait_ready(START_TIMEOUT) or child._pidfd is None:
            ours.close()
            drop(child)
            return None
        ours.settimeout(FORK_TIMEOUT)
        return _Running(child, ours)

    def _after_fork(self) -> None:
        """In a forked process the template belongs to the parent: let go, kill nothing."""
        running = self._running
        if running is not None:
            running.control.close()
            running.child.disown()
        for fd in (self._wake_in, self._wake_out):
            os.close(fd)
        self._reset()
