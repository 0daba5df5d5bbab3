"""Child side: the template, a warm single-threaded process forking each job's child on request
on its control socket (fd 0 at start), with *ready* children ahead (docs/architecture.md)."""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import struct
import time
from collections import deque
from typing import NoReturn

from .child_job import rehearse, serve_job, set_name, write_all
from .confine import kept_fds
from .wire import FORK_REQUEST, PID_FORMAT, PIDS_REQUEST, READY, STATUS_FORMAT, kill_forked

JOB_EXIT_ON_ERROR = 70  # a forked child that failed before its job
HOLD = 0.05  # seconds a new job runs alone before a ready child is forked beside it
READY_NAME = b"pdfpool-ready"  # /proc/PID/comm of a ready child, until its job line arrives


def _stop(signum: int, frame: object) -> NoReturn:
    """SIGTERM: the server is gone."""
    raise SystemExit


class _Forked:
    """A child: pid, pidfd, status pipe's write end, and (until handed out) the server's ends."""

    def __init__(self, pid: int, pidfd: int, status_out: int, ends: tuple[int, int, int]):
        self.pid, self.pidfd, self.status_out = pid, pidfd, status_out
        self.ends: tuple[int, ...] = ends

    def close_ends(self) -> None:
        for fd in self.ends:
            os.close(fd)
        self.ends = ()


class _Template:
    """The template's state: every child by pidfd, the ready ones oldest first, and demand."""

    def __init__(self, control: socket.socket, engines: tuple[str, ...], most: int, idle: float):
        self.control, self.engines, self.most, self.idle = control, engines, most, idle
        self.children: dict[int, _Forked] = {}
        self.ready: deque[_Forked] = deque()
        self.wanted = 0  # ready children to keep: the most jobs seen running at once lately
        self.handed: dict[int, float] = {}  # pidfd -> when: children handed out, running
        self.last_request = time.monotonic()
        self.poller = select.poll()
        self.poller.register(control, select.POLLIN)
        with open("/proc/self/comm", "rb") as comm:  # its own name, back after a warm fork
            self.name = comm.read().strip()

    def serve(self) -> None:
        """Requests and exits first; then a ready child more (no job started under HOLD ago still
        running), or the ready ones dropped after `idle` seconds without a request."""
        while True:
            due = None  # when a ready child is forked, or the ready ones are dropped
            if len(self.ready) < self.wanted:
                due = max(self.handed.values(), default=0.0) + HOLD
            elif self.ready:
                due = self.last_request + self.idle
            wait = None if due is None else max(0.0, due - time.monotonic()) * 1000
            events = self.poller.poll(wait)
            for fd, _ in events:
                if fd != self.control.fileno():
                    self.reap(fd)
                elif not self.request():
                    return
            if events or due is None or time.monotonic() < due:
                continue
            if len(self.ready) < self.wanted:
                self.ready.append(self.fork(warm=True))
            else:
                self.wanted = 0
                while self.ready:  # end of input on its job pipe: it exits
                    self.ready.popleft().close_ends()

    def request(self) -> bool:
        """One request answered; False at end of input."""
        try:
            message = self.control.recv(16)
        except OSError:
            return False
        if message == PIDS_REQUEST:
            pids = b"".join(struct.pack(PID_FORMAT, child.pid) for child in self.ready)
            with contextlib.suppress(OSError):
                self.control.send(pids or b"-")
            return True
        if message != FORK_REQUEST:
            return bool(message)
        self.last_request = time.monotonic()
        child = self.ready.popleft() if self.ready else self.fork(warm=False)
        self.handed[child.pidfd] = self.last_request
        running = len(self.children) - len(self.ready)  # this job's child included
        self.wanted = min(self.most, max(self.wanted, running))
        try:
            socket.send_fds(
                self.control, [struct.pack(PID_FORMAT, child.pid)], [child.pidfd, *child.ends]
            )
        except OSError:
            return False
        finally:
            child.close_ends()
        return True

    def fork(self, warm: bool) -> _Forked:
        """A new child: warmed up and waiting for its job line if `warm`, else for it at once."""
        job_in, job_out = os.pipe()
        answer_in, answer_out = os.pipe()
        status_in, status_out = os.pipe()
        if warm:  # the child is born with its name: never seen unnamed while it waits
            set_name(READY_NAME)
        pid = os.fork()
        if pid == 0:
            _become_job_child(job_in, answer_out, self.engines if warm else None)
        if warm:
            set_name(self.name)
        os.close(job_in)
        os.close(answer_out)
        pidfd = os.pidfd_open(pid)  # before any reaping: this pid is certainly the child's
        child = _Forked(pid, pidfd, status_out, (job_out, answer_in, status_in))
        self.children[pidfd] = child
        self.poller.register(pidfd, select.POLLIN)
        return child

    def reap(self, pidfd: int) -> None:
        """A child exited: reap it, write its exit code to its status pipe, forget it."""
        child = self.children.pop(pidfd)
        self.handed.pop(pidfd, None)
        self.poller.unregister(pidfd)
        os.close(pidfd)
        _, status, usage = os.wait4(child.pid, 0)
        if child in self.ready:  # died while ready (killed from outside): nobody waits
            self.ready.remove(child)
            child.close_ends()
        code = struct.pack(STATUS_FORMAT, os.waitstatus_to_exitcode(status), usage.ru_maxrss << 10)
        with contextlib.suppress(OSError):  # the server may have stopped listening for it
            os.write(child.status_out, code)
        os.close(child.status_out)


def serve_template(engines: tuple[str, ...], most: int, idle: float) -> NoReturn:
    """Say READY, then fork children on request until the server goes; never returns."""
    signal.signal(signal.SIGTERM, _stop)
    control = socket.socket(fileno=os.dup(0))  # a SOCK_SEQPACKET pair's end
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the control socket only under its own number from here on
    write_all(1, READY)
    os.dup2(null, 1)  # the server's READY pipe is not held by this process any more
    os.close(null)
    template = _Template(control, engines, most, idle)
    try:
        template.serve()
    except SystemExit:
        pass
    finally:
        for pidfd, child in template.children.items():
            kill_forked(pidfd, child.pid)
    os._exit(0)


def _become_job_child(job_in: int, answer_out: int, engines: tuple[str, ...] | None) -> NoReturn:
    """In the new child: own group, the job's pipes as stdin/stdout, stderr to /dev/null, no
    other fd, default signals; rehearsed if `engines` (a ready child), then the job."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(job_in, 0)
        os.dup2(answer_out, 1)
        os.dup2(null, 2)
        low = 3  # close_range(2) around the descriptors the job's sandbox is prepared on
        for kept in (*kept_fds(), os.sysconf("SC_OPEN_MAX")):
            os.closerange(low, kept)
            low = kept + 1
        if engines is not None:  # named READY_NAME from birth (see fork)
            rehearse(engines)  # its copy-on-write faults and caches paid before the job
            gc.freeze()
        serve_job(0, 1, renamed=engines is not None)
    except BaseException:
        os._exit(JOB_EXIT_ON_ERROR)
