"""Child side: ``python -P -m django_pdfpool.sandbox.child_main [options]``. A cold child
imports its engines, says READY, does one job and exits; with ``--template`` it warms up and
forks one such child per request instead (docs/architecture.md)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import time
from collections import deque
from typing import Any, NoReturn

import django_pdfpool.sandbox.confine as confine
import django_pdfpool.sandbox.engines as engines
import django_pdfpool.sandbox.wire as wire

from ..exceptions import ExtractionError

CPU_MARGIN = 1  # seconds of CPU time granted beyond the job's timeout before SIGXCPU
ALARM_MARGIN = 2  # seconds of wall time beyond the timeout before the child's own SIGALRM
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent (thread) dies
PR_SET_NAME = 15  # prctl(2): this process's name (comm)
JOB_NAME = b"pdfpool-job"  # a ready child's name once its job line is read
REHEARSAL_TIMEOUT, REHEARSAL_MEMORY = 60.0, 1 << 30  # a rehearsal's job (no limits are set)
JOB_EXIT_ON_ERROR = 70  # a forked child that failed before its job
HOLD = 0.05  # seconds a new job runs alone before a ready child is forked beside it
READY_NAME = b"pdfpool-ready"  # /proc/PID/comm of a ready child, until its job line arrives


def main(argv: list[str]) -> None:
    """Start up, then do one job, or serve forks as the template."""
    options = wire.read_child_options(argv)
    os.nice(options.nice)  # added to the server's own; inherited by the template's forks
    if options.parent is not None and not options.template:  # dies with its server's thread
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # (the template: when its socket closes)
        if os.getppid() != options.parent:  # gone already
            os._exit(0)
    imported = ("pypdf", *options.preload)
    for engine in imported:
        engines.preload(engine)
    if options.warm_up or options.template:
        rehearse(imported, encrypted=options.template)
    gc.collect()
    gc.freeze()  # start-up objects are never collected: later collections skip them
    if options.sandbox != wire.SANDBOX_OFF:  # once, for every child forked from here on
        confine.confine_process(confine.LEVELS[options.sandbox])
    if options.probe:  # the layers a job's child gets on this host, one JSON line; then exit
        confine.prepare_job()
        confine.confine_job(sys.executable)
        state = confine.state
        found = {"layers": sorted(state.layers), "missing": state.missing}
        write_all(1, json.dumps({**found, "landlock_abi": state.landlock_abi}).encode() + b"\n")
        raise SystemExit(0)
    if options.template:
        serve_template(imported, *options.ready)
    write_all(sys.stdout.fileno(), wire.READY)
    serve_job()


def set_name(name: bytes) -> None:
    """This process's name in /proc/PID/comm and ps (15 bytes at most)."""
    _prctl(PR_SET_NAME, name[:15])


def _prctl(option: int, value: Any) -> None:
    """prctl(2), where there is one (libc's, looked up once: a fork inherits it)."""
    prctl = getattr(confine.libc(), "prctl", None)
    if prctl is not None:
        prctl(option, value, 0, 0, 0)


def limit_self(memory_limit: int, timeout: float) -> None:
    """Address space, CPU seconds from now, a wall-clock alarm, and no core files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _lower(resource.RLIMIT_AS, memory_limit, memory_limit)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + timeout) + CPU_MARGIN
    _lower(resource.RLIMIT_CPU, soft, soft + 1)  # SIGXCPU at soft, SIGKILL at hard
    # If the parent dies mid-job nobody kills this process at the deadline: the alarm does.
    signal.alarm(math.ceil(timeout) + ALARM_MARGIN)


def _lower(kind: int, soft: int, hard: int) -> None:
    """Set a limit, never above the hard limit this process inherited."""
    _, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def extract_job(job: wire.ExtractionJob, data: bytes | None = None) -> wire.ChildAnswer:
    """Read (unless given), hash and extract the job's file; every ending is an answer."""
    try:
        if job.engine != "pypdf":  # pypdf's own setup is configure_pypdf's, just below
            engines.preload(job.engine)  # at once if preloaded; imported here otherwise
        engines.configure_pypdf(job.memory_limit)
        if data is None:  # a regular file only: a FIFO or a device would hang (nonblocking open)
            with open(os.open(job.path, os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0) as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    raise ExtractionError("not_a_pdf", detail="not a regular file")
                data = file.read()
        # Hashed here, over the very bytes that are parsed: the parent never reads the file.
        digest = hashlib.sha256(data).hexdigest()
        limits = job.max_pages, job.refuse, job.max_text_bytes
        text = engines.extract_pages(job.engine, data, *limits)
        return wire.Extracted(sha256=digest, **text)
    except BaseException as exc:
        code, detail = engines.classify(exc)
    # Out of the except block: the traceback and the frames holding the document are freed.
    return ExtractionError(code, detail=detail)


def rehearse(imported: tuple[str, ...], encrypted: bool = False) -> None:
    """A job's whole path on the warm-up document with each engine (also encrypted, for the
    template), no limits set: imports, caches and copy-on-write faults paid before a job."""
    locked = engines.encrypted_warm_ups() if encrypted else []
    for engine in imported:
        job = wire.ExtractionJob("", engine, REHEARSAL_TIMEOUT, REHEARSAL_MEMORY, None, False)
        for document in [engines.WARM_UP_PDF, *(locked if engine == "pypdf" else ())]:
            wire.encode_answer(extract_job(wire.decode_job(wire.encode_job(job)), document))


def peak_rss() -> int:
    """VmHWM in bytes (ru_maxrss counts the parent's), by the fd opened before the sandbox."""
    fd = confine.state.status_fd
    try:
        if fd is not None:
            status = os.pread(fd, 1 << 14, 0)
        else:
            with open("/proc/self/status", "rb") as file:
                status = file.read()
        return int(status.split(b"VmHWM:")[1].split()[0]) * 1024
    except (OSError, ValueError, IndexError, MemoryError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data`, however many writes the pipe takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve_job(renamed: bool = False) -> NoReturn:
    """Wait for the job line on stdin, limit this process, say STARTED, answer on stdout, exit
    (no teardown); a ready child (`renamed` while it waits) takes JOB_NAME with its job."""
    confine.prepare_job()  # the job's sandbox but its file: a ready child's, while it waits
    with open(0, "rb", closefd=False) as stdin:
        line = stdin.readline()
    if not line.strip():  # EOF: the parent is gone or discarded this child
        os._exit(0)
    if renamed:
        set_name(JOB_NAME)
    started = time.perf_counter()
    job = wire.decode_job(line)
    try:
        confine.confine_job(job.path)  # before a byte of the PDF is read
        refused = None
    except OSError:  # a required layer could not be had: the PDF is not read
        refused = ExtractionError("crashed", detail="sandbox layer unavailable")
    limit_self(job.memory_limit, job.timeout)
    write_all(1, wire.STARTED)
    answer = extract_job(job) if refused is None else refused
    answer.elapsed = time.perf_counter() - started
    answer.peak_rss = peak_rss()
    try:
        data = wire.encode_answer(answer)
    except MemoryError:
        del answer
        error = ExtractionError("too_large", detail="MemoryError", peak_rss=peak_rss())
        error.elapsed = time.perf_counter() - started
        data = wire.encode_answer(error)
    write_all(1, data)
    # No interpreter teardown: the parent has its answer, and the memory goes back anyway.
    os._exit(0)


class _Forked:
    """A child: pid, pidfd, status pipe's write end, and (until handed out) the server's ends."""

    def __init__(self, pid: int, pidfd: int, status_out: int, ends: tuple[int, ...]):
        self.pid, self.pidfd, self.status_out, self.ends = pid, pidfd, status_out, ends

    def close_ends(self) -> None:
        for fd in self.ends:
            os.close(fd)
        self.ends = ()


class _Template:
    """The template's state: every child by pidfd, the ready ones oldest first, and demand."""

    def __init__(self, control: socket.socket, imported: tuple[str, ...], most: int, idle: float):
        self.control, self.imported, self.most, self.idle = control, imported, most, idle
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
                child = self.fork(warm=True)
                if child is None:  # none to spare now: wanted again at the next request
                    self.wanted = len(self.ready)
                else:
                    self.ready.append(child)
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
        if message == wire.PIDS_REQUEST:
            pids = b"".join(struct.pack(wire.PID_FORMAT, child.pid) for child in self.ready)
            with contextlib.suppress(OSError):
                self.control.send(pids or b"-")
            return True
        if message != wire.FORK_REQUEST:
            return bool(message)
        self.last_request = time.monotonic()
        child = self.ready.popleft() if self.ready else self.fork(warm=False)
        if child is None:  # no valid answer: the server runs the job cold
            with contextlib.suppress(OSError):
                self.control.send(b"-")
            return True
        self.handed[child.pidfd] = self.last_request
        running = len(self.children) - len(self.ready)  # this job's child included
        self.wanted = min(self.most, max(self.wanted, running))
        pid = struct.pack(wire.PID_FORMAT, child.pid)
        try:
            socket.send_fds(self.control, [pid], [child.pidfd, *child.ends])
        except OSError:
            return False
        finally:
            child.close_ends()
        return True

    def fork(self, warm: bool) -> _Forked | None:
        """A new child: warmed up and waiting for its job line if `warm`, else for it at once;
        None if no descriptor or process is to be had now (the running children go on)."""
        pid, ends = -1, list[int]()
        if warm:  # the child is born with its name: never seen unnamed while it waits
            set_name(READY_NAME)
        try:
            for _ in range(3):
                ends += os.pipe()
            pid = os.fork()
        except OSError:
            for fd in ends:
                os.close(fd)
            return None
        finally:
            if warm and pid != 0:
                set_name(self.name)
        job_in, job_out, answer_in, answer_out, status_in, status_out = ends
        if pid == 0:
            _become_job_child(job_in, answer_out, self.imported if warm else None)
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
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):  # the server may have stopped listening for it
            os.write(child.status_out, struct.pack(wire.STATUS_FORMAT, code, usage.ru_maxrss << 10))
        os.close(child.status_out)


def serve_template(imported: tuple[str, ...], most: int, idle: float) -> NoReturn:
    """Say READY on the control socket, then fork children on request until the server goes;
    never returns."""
    control = socket.socket(fileno=os.dup(0))  # a SOCK_SEQPACKET pair's end
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the control socket only under its own number from here on
    os.dup2(null, 1)  # nor the server's pipe: nothing is written to it
    os.close(null)
    control.send(wire.READY)
    template = _Template(control, imported, most, idle)
    try:
        template.serve()  # until the server closes the control socket (or dies)
    finally:
        for pidfd, child in template.children.items():  # none reaped: no pid reused
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
    os._exit(0)


def _become_job_child(job_in: int, answer_out: int, imported: tuple[str, ...] | None) -> NoReturn:
    """In the new child: own group, the job's pipes as stdin/stdout, stderr to /dev/null, no
    other fd, default signals; rehearsed if `imported` (a ready child), then the job."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(job_in, 0)
        os.dup2(answer_out, 1)
        os.dup2(null, 2)
        low = 3  # close_range(2) around the descriptors the job's sandbox is prepared on
        for kept in (*sorted(confine.state.root_fds), os.sysconf("SC_OPEN_MAX")):
            os.closerange(low, kept)
            low = kept + 1
        if imported is not None:  # named READY_NAME from birth (see fork)
            rehearse(imported)  # its copy-on-write faults and caches paid before the job
            gc.freeze()
        serve_job(renamed=imported is not None)
    except BaseException:
        os._exit(JOB_EXIT_ON_ERROR)


if __name__ == "__main__":
    main(sys.argv[1:])
