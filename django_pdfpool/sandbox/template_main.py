"""Child side: the template, a warmed-up, single-threaded process that forks each job's child.

Its control socket (fd 0 at start) carries requests: the job's three pipe ends in, the new
child's pid and pidfd out. It reaps its children and writes each one's exit status to the
status pipe that came with it. End of input (the server is gone), or SIGTERM (the kernel's
word that the server's thread that started it died), kills its children, then it exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
from typing import NoReturn

from .child_job import serve_job, write_all
from .wire import READY

FORK_REQUEST = b"F"
PID_FORMAT = "=i"  # the reply: the child's pid (its pidfd rides along)
STATUS_FORMAT = "=i"  # on the status pipe: the exit code (-N: killed by signal N)
JOB_EXIT_ON_ERROR = 70  # a forked child that failed before its job


class _Stop(Exception):
    """SIGTERM: the server is gone."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def serve_template() -> NoReturn:
    """Say READY, then fork a child per request until the server goes; never returns."""
    signal.signal(signal.SIGTERM, _stop)
    control = socket.socket(fileno=os.dup(0))  # a SOCK_SEQPACKET pair's end
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the control socket only under its own number from here on
    write_all(1, READY)
    os.dup2(null, 1)  # the server's READY pipe is not held by this process any more
    os.close(null)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status pipe)
    poller = select.poll()
    poller.register(control, select.POLLIN)
    try:
        while True:
            for fd, _ in poller.poll():
                if fd != control.fileno():
                    _report(fd, children, poller)
                elif not _fork_one(control, children, poller):
                    raise _Stop
    except _Stop:
        pass
    finally:
        for pidfd, (pid, _status) in children.items():
            _kill(pidfd, pid)
    os._exit(0)


def _fork_one(
    control: socket.socket, children: dict[int, tuple[int, int]], poller: select.poll
) -> bool:
    """One request: fork the job's child, answer its pid and pidfd; False at end of input."""
    try:
        message, fds, _, _ = socket.recv_fds(control, 16, 3, socket.MSG_CMSG_CLOEXEC)
    except OSError:
        return False
    if not message:
        return False
    if message != FORK_REQUEST or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return True
    job_in, answer_out, status_out = fds
    pid = os.fork()
    if pid == 0:
        _become_job_child(job_in, answer_out)
    os.close(job_in)
    os.close(answer_out)
    pidfd = os.pidfd_open(pid)  # before any reaping: this pid is certainly the child's
    children[pidfd] = (pid, status_out)
    poller.register(pidfd, select.POLLIN)
    try:
        socket.send_fds(control, [struct.pack(PID_FORMAT, pid)], [pidfd])
    except OSError:
        return False
    return True


def _become_job_child(job_in: int, answer_out: int) -> NoReturn:
    """In the new child: its own session, the job's pipes as stdin and stdout, stderr to
    /dev/null, no other descriptor and default signal handling; then the job."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setsid()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(job_in, 0)
        os.dup2(answer_out, 1)
        os.dup2(null, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # close_range(2): one call
        serve_job(0, 1)
    except BaseException:
        os._exit(JOB_EXIT_ON_ERROR)


def _report(pidfd: int, children: dict[int, tuple[int, int]], poller: select.poll) -> None:
    """A child exited: reap it, write its exit code to its status pipe, forget it."""
    pid, status_out = children.pop(pidfd)
    poller.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):  # the server may have stopped listening for it
        os.write(status_out, struct.pack(STATUS_FORMAT, os.waitstatus_to_exitcode(status)))
    os.close(status_out)


def _kill(pidfd: int, pid: int) -> None:
    """SIGKILL to a child still running (and its group), when the template ends."""
    running = not select.select([pidfd], [], [], 0)[0]  # then its group id is its own
    with contextlib.suppress(OSError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    if running:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
