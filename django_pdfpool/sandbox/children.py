"""Parent side: how a job gets and keeps its child: a `Child` of our own (cold, or the
template) or a `ForkedChild` of the template, which `Template` supervises (docs/architecture.md)."""

from __future__ import annotations

import atexit
import collections
import contextlib
import io
import os
import select
import signal
import site
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import django_pdfpool.sandbox.wire as wire

CHILD_MODULE = "django_pdfpool.sandbox.child_main"
READ_CHUNK = 1 << 20
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
COLD, FORKED = "cold", "forked"  # how a child started: a new interpreter, or the template
START_TIMEOUT = 30.0  # seconds a template may take to get ready before it is given up
FORK_TIMEOUT = 5.0  # seconds for its answer to a fork request before it is given up
STATUS_TIMEOUT = 5.0  # seconds for the exit status of a child that has exited
STEADY = 5.0  # a template that lived this long was healthy: restart it at once
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}  # a server's, never a child's (`Child`)
MAX_READY = 4  # ready children a template keeps at most (as many as jobs ran at once lately)
READY_IDLE = 5.0  # seconds without a job after which the ready children exit
SUPPORTED = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
# What the interpreter needs to start, find its packages and decode paths (and every LC_*):
# nothing else of the parent's environment reaches a child.
BASE_ENV = ("PATH", "LANG", "LANGUAGE", "LD_LIBRARY_PATH", "PYTHONHOME", "PYTHONPATH",
            "PYTHONUSERBASE", "PYTHONNOUSERSITE")  # fmt: skip


def child_env(names: tuple[str, ...]) -> dict[str, str]:
    """BASE_ENV, LC_* and `names` where set; this checkout on PYTHONPATH (never site-packages)."""
    wanted = {*BASE_ENV, *names}
    env = {k: v for k, v in os.environ.items() if k in wanted or k.startswith("LC_")}
    if _PACKAGE_ROOT not in {*site.getsitepackages(), site.getusersitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def interpreter() -> str:
    """The Python the children run on: this one, or where an embedding server (uWSGI,
    mod_wsgi) made ``sys.executable`` its own binary, the one under ``sys.exec_prefix``."""
    if os.path.basename(sys.executable).startswith(("python", "pypy")):
        return sys.executable
    major, minor = sys.version_info[:2]
    for name in (f"python{major}.{minor}", f"python{major}", "python"):
        found = os.path.join(sys.exec_prefix, "bin", name)
        if os.access(found, os.X_OK):
            return found
    return sys.executable


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Around a child's start: it is born with the stop signals blocked (the template's forks
    too), as systemd signals every process of a service it stops: the server drains its jobs."""
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def job_started(output: bytes | bytearray) -> bool:
    """Whether the child said it read its job (after READY from a cold child)."""
    return output.startswith((wire.STARTED, wire.READY + wire.STARTED))


@dataclass
class Outcome:
    """How a conversation with a child ended, for `extract` to judge."""

    output: bytes | bytearray  # decode_answer empties a bytearray
    returncode: int | None  # None: not known (a forked child whose template died first)
    timed_out: bool = False  # killed by us at the deadline
    overflow: bool = False  # killed by us: more output than allowed
    lost: bool = False  # no child read the job: gone before it could, or the deadline came
    complete: bool = False  # a whole answer arrived (the child is exiting, not yet reaped)
    started: bool = False  # the child said it had read the job
    start: str = COLD  # how the child that answered started: COLD or FORKED


POLL_MOST = 2**31 - 1  # ms: the longest wait poll() takes (24.8 days); the answer loop polls again


def _readable(fds: list[int], seconds: float | None) -> bool:
    """Whether one of `fds` is readable (or at its end) within `seconds` (None: no end). By
    poll, not select, which refuses a descriptor past FD_SETSIZE (a busy server has them)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if seconds is None else min(seconds * 1000, POLL_MOST)))


class Handle:
    """A job's process as the parent sees it: job pipe, answer pipe, pidfd; kill and reap."""

    start = COLD
    peak_rss: int | None = None  # bytes, its ru_maxrss from the kernel once reaped

    def __init__(self, pid: int, job: IO[bytes] | None, out: IO[bytes], pidfd: int | None) -> None:
        self.pid, self._job, self._answer, self._pidfd = pid, job, out, pidfd  # job: till sent
        self._lock = threading.Lock()  # kill vs reap: never signal a reaped (reusable) pid
        with _live_lock:
            _live.add(self)

    def kill(self) -> None: ...  # each kind of child its own way

    def reap(self, deadline: float | None = None) -> int | None: ...

    def _close(self) -> None:
        """Release the pipes and the pidfd, and forget the child (reaped, or let go of)."""
        for pipe in (self._job, self._answer):
            if pipe is not None:
                pipe.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        with _live_lock:
            _live.discard(self)

    def send(self, job_line: bytes) -> bool:
        """Hand the job over; False if the child is gone already (it never saw the job)."""
        job, self._job = self._job, None  # closed once it is sent, whatever happens
        if job is None:
            return False
        try:
            with job:
                job.write(job_line)  # a few hundred bytes: never blocks
            return True
        except (OSError, ValueError):  # the child is gone, or the pipe closed under us
            return False

    def receive(self, deadline: float, max_output: int) -> Outcome:
        """Read until a whole answer, EOF, the deadline or too much output (these two kill)."""
        output, fd = bytearray(), self._answer.fileno()
        timed_out = overflow = False
        poller = select.poll()  # one for the whole answer (``_readable`` makes one per call)
        poller.register(fd, select.POLLIN)
        while (remaining := deadline - time.monotonic()) > 0:
            if not poller.poll(min(remaining * 1000 + 1, POLL_MOST)):
                continue
            try:  # one byte past max_output at most: enough to know it is too much
                chunk = os.read(fd, min(READ_CHUNK, max_output + 1 - len(output)))
            except OSError:  # closed under us (kill_all at exit): as good as EOF
                chunk = b""
            if not chunk:
                break
            output += chunk
            end = wire.answer_end(output)
            if max(len(output), end or 0) > max_output:  # sent, or only declared
                overflow = True
                break
            if end is not None and len(output) >= end:  # handed on as it is: no copy
                return Outcome(output, None, complete=True, started=True, start=self.start)
        else:
            timed_out = True
        if timed_out or overflow:
            self.kill()
        started = job_started(output)
        return Outcome(output, None, timed_out, overflow, started=started, start=self.start)

    def finish(self, outcome: Outcome, deadline: float) -> None:
        """After EOF the child is exiting: wait for that without reaping it, up to the deadline
        (then kill it: `timed_out`), and reap it into `outcome`."""
        if self._pidfd is not None:
            exited = _readable([self._pidfd], max(0.0, deadline - time.monotonic()))
        else:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            while not (exited := os.waitid(os.P_PID, self.pid, flags) is not None):
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.001)
        if not exited:
            self.kill()
            outcome.timed_out = True
        outcome.returncode = self.reap()


# What a child starts with: interpreter, env names, engines to preload, sandbox level, nice.
Spec = tuple[str, tuple[str, ...], tuple[str, ...], str, int]


class Child(Handle):
    """Our own child (its own process group): a cold job's, or the template (`template=` fd)."""

    def __init__(
        self, spec: Spec, template: int | None = None, ready: tuple[int, float] = (0, 0.0)
    ) -> None:
        # -P: the cwd not on sys.path; stderr nowhere (pypdf's thousands of lines would fill it)
        python, env, preload, sandbox, nice = spec
        role = {"template": template is not None, "parent": os.getpid(), "ready": ready}
        options = wire.child_options(preload, False, **role, sandbox=sandbox, nice=nice)
        with stop_signals_blocked():
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
        assert self.proc.stdout is not None  # stdout=PIPE
        try:
            pidfd: int | None = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            pidfd = None
        super().__init__(self.proc.pid, self.proc.stdin, self.proc.stdout, pidfd)

    def alive(self) -> bool:
        """Whether the child has not exited yet."""
        with self._lock:
            return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the child and its group (which it may have left), unless reaped already."""
        with self._lock:
            if self.proc.returncode is None:
                for kill in (os.kill, os.killpg):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        kill(self.pid, signal.SIGKILL)

    def reap(self, deadline: float | None = None) -> int:
        """Wait for the (exiting or killed) child and release its pipes."""
        with self._lock:
            if self.proc.returncode is None:
                _, status, usage = os.wait4(self.pid, 0)
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.peak_rss = usage.ru_maxrss * 1024
            self._close()
            return self.proc.returncode

    def disown(self) -> None:
        """In a forked process: let go of the parent's child without signalling it."""
        self._close()
        self.proc.returncode = 0  # not ours to wait for


class ForkedChild(Handle):
    """A job's child forked by the template: killed by pidfd, reaped by the template."""

    start = FORKED

    def __init__(self, pid: int, pidfd: int, job_fd: int, answer_fd: int, status_fd: int) -> None:
        self._status_fd = status_fd
        super().__init__(pid, io.FileIO(job_fd, "w"), io.FileIO(answer_fd, "r"), pidfd)

    def kill(self) -> None:
        """SIGKILL to the child (by pidfd) and, while it runs, to its process group."""
        with self._lock:
            if self._pidfd is None:  # reaped
                return
            running = not _readable([self._pidfd], 0)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            if running:  # its group, after its setpgid: not once the template may have reaped it
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, signal.SIGKILL)

    def reap(self, deadline: float | None = None) -> int | None:
        """Its exit status as the template reports it, or at once as the kernel keeps it for a
        stopped template (None if the template died first, or is slower than STATUS_TIMEOUT or
        the job's `deadline`)."""
        with self._lock:
            if self._pidfd is None:  # reaped already
                return None
            _readable([self._pidfd], None)
            held = None if _readable([self._status_fd], 0) else _held_status(self.pid, self._pidfd)
            if held is not None:  # its peak unknown: only the template's wait4 has it
                self._close()
                os.close(self._status_fd)
                return held
            wait = STATUS_TIMEOUT if deadline is None else deadline - time.monotonic()
            ready = _readable([self._status_fd], max(0.0, min(STATUS_TIMEOUT, wait)))
            status = os.read(self._status_fd, _STATUS_SIZE) if ready else b""
            self._close()
            os.close(self._status_fd)
        if len(status) != _STATUS_SIZE:
            return None
        returncode, self.peak_rss = struct.unpack(wire.STATUS_FORMAT, status)
        return int(returncode)


def _held_status(pid: int, pidfd: int) -> int | None:
    """The exit code of `pid` (`pidfd`'s) if it is a zombie whose parent, the template, is
    stopped and cannot reap it (from /proc); else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:  # the name may hold ")" and spaces
            fields = stat.read().rpartition(b")")[2].split()
        with open(f"/proc/{int(fields[1])}/stat", "rb") as stat:
            parent = stat.read().rpartition(b")")[2].split()
        signal.pidfd_send_signal(pidfd, 0)  # not reaped yet: what was read is its own
    except (OSError, ValueError, IndexError):
        return None
    if fields[0] != b"Z" or parent[0] not in (b"T", b"t"):
        return None
    return os.waitstatus_to_exitcode(int(fields[49]))  # field 52: its status, as wait gives it


@dataclass(frozen=True)
class ChildStarts:
    """How this process's extraction children started, and its template (status page)."""

    forked: int  # children forked from the template
    cold: int  # children started as a new interpreter (no template, or warm=False)
    template_pid: int | None  # the running template, None while there is none
    template_starts: int  # templates started so far: more than one means restarts
    enabled: bool  # whether a template is wanted (``configure(warm=)``)
    ready: int = 0  # the template's ready children (forked and warmed up ahead of jobs)


_live: set[Handle] = set()  # every unreaped child, killed at exit
_live_lock = threading.Lock()
_STATUS_SIZE = struct.calcsize(wire.STATUS_FORMAT)
RECENT_JOBS = 20  # job children whose peak this process remembers
# Each reaped job child's (time.time(), peak RSS bytes (the kernel's: a cold child's counts
# the server's pages at its start), COLD or FORKED), the newest last.
recent_peaks: collections.deque[tuple[float, int, str]] = collections.deque(maxlen=RECENT_JOBS)


def remember(child: Handle) -> None:
    """Keep a reaped job child's peak RSS in ``recent_peaks``."""
    if child.peak_rss is not None:
        recent_peaks.append((time.time(), child.peak_rss, child.start))


def drop(child: Handle, deadline: float | None = None) -> None:
    """End a child that has no job, or has answered (kill its group, reap it)."""
    child.kill()
    child.reap(deadline)


def kill_all() -> None:
    """Kill and reap every child this process still has (at exit)."""
    with _live_lock:
        children = list(_live)  # this process's: a fork's forgets its parent's
    for child in children:
        drop(child)


def _forget_after_fork() -> None:
    """In a forked process the children are the parent's: forget them, signal none."""
    global _live_lock
    _live_lock = threading.Lock()
    _live.clear()


atexit.register(kill_all)
os.register_at_fork(after_in_child=_forget_after_fork)


class _Running:
    """A ready template: its process and our end of its control socket."""

    def __init__(self, child: Child, control: socket.socket) -> None:
        self.child, self.control = child, control
        self.retired = False  # ended by us: not counted as a failure
        self.lock = threading.Lock()  # one request at a time on the socket; guards the two below
        self.owed = 0  # replies to come to requests whose askers left: read and dropped
        self.silent_since: float | None = None  # since a request it has not replied to

    def given_up(self) -> bool:
        """Whether it has not replied for FORK_TIMEOUT to a request: to be replaced."""
        since = self.silent_since
        return since is not None and time.monotonic() - since >= FORK_TIMEOUT

    def fork(self, deadline: float) -> ForkedChild | None:
        """A (ready) child from the template, or None if it did not answer by `deadline`."""
        reply, fds = self._ask(wire.FORK_REQUEST, 4, deadline)
        if len(reply) != struct.calcsize(wire.PID_FORMAT) or not fds:
            return None
        (pid,) = struct.unpack(wire.PID_FORMAT, reply)
        return ForkedChild(pid, *fds)

    def ready_pids(self) -> list[int]:
        """The pids of the template's ready children ([] if it does not answer)."""
        reply = self._ask(wire.PIDS_REQUEST, 0, time.monotonic() + FORK_TIMEOUT)[0]
        pids = b"" if reply == b"-" else reply
        return [pid for (pid,) in struct.iter_unpack(wire.PID_FORMAT, pids)]

    def _ask(self, request: bytes, descriptors: int, deadline: float) -> tuple[bytes, list[int]]:
        """The template's reply with as many descriptors as `request` gets; nothing if it is
        gone, silent FORK_TIMEOUT, late for the asker's `deadline` (its turn included: the
        reply is then owed, and dropped when it comes) or answers otherwise."""
        end = min(deadline, time.monotonic() + FORK_TIMEOUT)
        if not self.lock.acquire(timeout=max(0.0, end - time.monotonic())):
            return b"", []
        try:
            if self.silent_since is not None:  # silent for others already: not 5 s more
                end = min(end, self.silent_since + FORK_TIMEOUT)
            while self.owed:  # the late replies first, in order: descriptors closed
                for fd in self._reply(end)[1]:
                    os.close(fd)
            if end <= time.monotonic():
                return b"", []
            self.control.send(request)
            self.owed += 1
            self.silent_since = self.silent_since or time.monotonic()
            reply, fds = self._reply(end)
        except OSError:
            return b"", []
        finally:
            self.lock.release()
        if len(fds) == descriptors:
            return reply, fds
        for fd in fds:
            os.close(fd)
        return b"", []

    def _reply(self, end: float) -> tuple[bytes, list[int]]:
        """The next reply (under ``lock``), by `end` (else TimeoutError); OSError at its end."""
        self.control.settimeout(max(1e-6, end - time.monotonic()))
        reply, fds = socket.recv_fds(self.control, 4 * 64, 4, socket.MSG_CMSG_CLOEXEC)[:2]
        if not reply:
            raise ConnectionResetError("the template is gone")
        self.owed -= 1
        self.silent_since = time.monotonic() if self.owed else None
        return reply, fds


class Template:
    """The warm template: what it starts with, its supervisor thread, counts of child starts."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.python = interpreter()
        self.env: tuple[str, ...] = ()  # names of variables children get besides the minimum
        self.preload: tuple[str, ...] = ()  # engines beyond pypdf that jobs have asked for
        self.sandbox = "none"  # the level children must reach (confine.LEVELS), or "off"
        self.nice = wire.DEFAULT_NICE  # the children's nice above the server's (bounds.NICE)
        self.max_ready, self.ready_idle = MAX_READY, READY_IDLE  # read when a template starts
        self._reset()
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self.shutdown)  # before kill_all (registered first): no restart then

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._running: _Running | None = None
        self._thread: threading.Thread | None = None
        self._wake_in, self._wake_out = os.pipe()
        os.set_blocking(self._wake_in, False)
        os.set_blocking(self._wake_out, False)
        self._forked = self._cold = self._starts = 0

    def child(self, engine: str, deadline: float, warm: bool = True) -> Handle:
        """A child for a job: forked if `warm` and a template is ready, else cold; TimeoutError
        once `deadline` has passed (none started)."""
        running = self._wanted(engine) if warm else None
        if running is not None and time.monotonic() < deadline:
            forked = running.fork(deadline)
            if forked is not None:
                with self._lock:
                    self._forked += 1
                return forked
            if running.given_up() or time.monotonic() < deadline:  # not late for this job only
                self._retire(running)  # replaced, and this job goes cold
        if time.monotonic() >= deadline:
            raise TimeoutError("the job's deadline passed before it had a child")
        with self._lock:
            self._cold += 1
        preload = (engine,) if engine != "pypdf" else ()
        return Child((self.python, self.env, preload, self.sandbox, self.nice))

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
            was = self._spec(), self.enabled
            self.python, self.sandbox = python or self.python, sandbox or self.sandbox
            self.env = self.env if env is None else env
            self.nice = self.nice if nice is None else nice
            self.enabled = self.enabled if enabled is None else enabled
            running = self._running if (self._spec(), self.enabled) != was else None
        if running is not None:
            self._retire(running, end=True)  # none of the old kind is left on return
        self._wake()

    def prewarm(self) -> None:
        """Start the template now rather than at the first job."""
        with self._lock:
            self._ensure_thread()

    def shutdown(self) -> None:
        """End the template now; `configure(enabled=True)` has one start again."""
        self.configure(enabled=False)

    def pid(self) -> int | None:
        """The running template's pid, or None."""
        with self._lock:
            return None if self._running is None else self._running.child.pid

    def idle_pids(self) -> list[int]:
        """The running template's pid and its ready children's ([] while there is none)."""
        with self._lock:
            running = self._running
        return [] if running is None else [running.child.pid, *self._ready_pids(running)]

    def status(self) -> ChildStarts:
        """Counts of forked and cold starts, the template and its ready children."""
        with self._lock:
            running = self._running
            pid = None if running is None else running.child.pid
            counts = (self._forked, self._cold, pid, self._starts, self.enabled)
        ready = 0 if running is None else len(self._ready_pids(running))
        return ChildStarts(*counts, ready=ready)

    def _ready_pids(self, running: _Running) -> list[int]:
        """`running`'s ready children; a template that no longer answers is replaced."""
        pids = running.ready_pids()
        if running.given_up():
            self._retire(running)
        return pids

    def _wanted(self, engine: str) -> _Running | None:
        """The running template if it has `engine`; else None (and a template that has it)."""
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
            self._thread = threading.Thread(target=self._supervise, name="pdfpool-template")
            self._thread.daemon = True
            self._thread.start()

    def _retire(self, running: _Running, end: bool = False) -> None:
        """Stop handing out `running`; ended now if `end`, else by the supervisor."""
        with self._lock:
            running.retired = True
            if self._running is running:
                self._running = None
        self._wake()
        if end:  # its running children go on; killed before its socket closes (a template that
            drop(running.child)  # read the end of it would kill every child it has, on the way)
            with contextlib.suppress(OSError):  # wakes a reader; its number is not reused under it
                running.control.shutdown(socket.SHUT_RDWR)
            with running.lock:
                running.control.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_out, b"!")

    def _sleep(self, seconds: float | None, pidfd: int | None = None) -> None:
        """Until `seconds` pass, `pidfd`'s process exits, or `_wake()`; then drain the wakes."""
        _readable([self._wake_in] if pidfd is None else [self._wake_in, pidfd], seconds)
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_in, 4096)

    def _supervise(self) -> None:
        """Start a template, wait for its death or a change, reap it; again until turned off."""
        failures = 0
        while True:
            with self._lock:
                if not self.enabled:
                    self._thread = None
                    return
                spec = self._spec()
            running, born, died = self._launch(spec), time.monotonic(), True
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
                self._retire(running, end=True)
            young = died and (running is None or time.monotonic() - born < STEADY)
            failures = failures + 1 if young else 0
            if failures > 1:  # failed young twice running: back off, up to 30 s
                self._sleep(min(30.0, 0.25 * 2**failures))

    def _spec(self) -> Spec:
        """What a template starts with (read under ``_lock``)."""
        return self.python, self.env, self.preload, self.sandbox, self.nice

    def _launch(self, spec: Spec) -> _Running | None:
        """A ready template, or None if it could not start or get ready in time."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ready, child = (self.max_ready, self.ready_idle), None
        with contextlib.suppress(OSError):  # no process, a timeout, or the template is gone
            with theirs:
                child = Child(spec, theirs.fileno(), ready)
            ours.settimeout(START_TIMEOUT)  # its imports and rehearsal done, it says READY
            if ours.recv(len(wire.READY)) == wire.READY and child._pidfd is not None:
                return _Running(child, ours)
        ours.close()
        if child is not None:
            drop(child)
        return None

    def _after_fork(self) -> None:
        """In a forked process the template belongs to the parent: let go, kill nothing."""
        running = self._running
        if running is not None:
            running.control.close()
            running.child.disown()
        for fd in (self._wake_in, self._wake_out):
            os.close(fd)
        self._reset()
