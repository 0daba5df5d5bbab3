"""A test-only engine (registered by the tests, never shipped): what code run by a hostile PDF
inside a job's child would try. Each attempt reports "refused: ERRNO" or "escaped: ...".

The "document" is b"%PDF-kit\\n" and a JSON object naming the targets (see `document`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import signal
import socket
import subprocess

ENGINE = "tests.support.escape_kit:run"
PTRACE_SEIZE, PTRACE_DETACH = 0x4206, 17
VICTIM_NOFILE = 64  # what the kit lowers the victim's open-files limit to
IOPRIO_WHO_PROCESS = 1
# System calls the os module has no wrapper for, by architecture.
NUMBERS = {
    "x86_64": {"ioprio_get": 252, "ioprio_set": 251, "sched_setattr": 314,
               "migrate_pages": 256, "move_pages": 279},
    "aarch64": {"ioprio_get": 31, "ioprio_set": 30, "sched_setattr": 274,
                "migrate_pages": 238, "move_pages": 239},
}  # fmt: skip


def document(**targets: object) -> bytes:
    """victim (a pid to signal, whose environ and fd 1 to reach), server (the server's pid,
    whose environ holds a secret), port (a loopback listener), directory (where to create a
    file), secret (a file of the server's user the job was not given), neighbour (another
    caller's staged PDF, beside the job's own), forge (a job's child
    whose answer pipe to write a forged answer into), planted (a file in a directory on the
    child's PYTHONPATH that holds no package the child needs: a project's settings, say)."""
    return b"%PDF-kit\n" + json.dumps(targets).encode()


def _refused(exc: OSError) -> str:
    return f"refused: {errno.errorcode.get(exc.errno or 0, exc.errno)}"


def attempt(action) -> str:  # type: ignore[no-untyped-def]
    try:
        return f"escaped: {action()}"
    except OSError as exc:
        return _refused(exc)
    except Exception as exc:  # reported, never raised: the other attempts go on
        return f"error: {type(exc).__name__}"


def _signal(pid: int) -> str:
    os.kill(pid, signal.SIGCONT)  # harmless to a running process, but it is delivered
    return f"signalled {pid}"


def _environ(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as file:
        return f"{len(file.read())} bytes of environ"


def _open_fd(pid: int) -> str:
    fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)
    return f"opened fd 1 of {pid} for writing"


def _ptrace_parent() -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    if libc.ptrace(PTRACE_SEIZE, parent, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    libc.ptrace(PTRACE_DETACH, parent, 0, 0)  # or detached when this process exits
    return f"seized {parent}"


def _connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(b"escaped\n")
    return f"connected to 127.0.0.1:{port}"


def _create(directory: str) -> str:
    path = os.path.join(directory, f"created-by-{os.getpid()}")
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    return f"created {path}"


def _exec() -> str:
    out = subprocess.run(["/bin/echo", "ran"], capture_output=True, timeout=10, check=False)
    return f"ran /bin/echo: {out.stdout!r}"


def _execve() -> str:
    """execve itself (not the fork before it): ENOENT means the call reached the kernel."""
    libc = ctypes.CDLL(None, use_errno=True)
    argv = (ctypes.c_char_p * 2)(b"/nonexistent-pdfpool", None)
    libc.execve(b"/nonexistent-pdfpool", argv, None)
    number = ctypes.get_errno()
    if number == errno.ENOENT:
        return "execve reached the file system (ENOENT)"
    raise OSError(number, os.strerror(number))


def _read(path: str) -> str:
    with open(path, "rb") as file:
        return f"read {len(file.read())} bytes of {path}"


def _syscall(name: str, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = int(libc.syscall(ctypes.c_long(NUMBERS[platform.machine()][name]), *args))
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result


def _prlimit_victim(pid: int) -> str:
    """The victim's open-files limit lowered (harmless to a sleep; RLIMIT_CPU would kill)."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (VICTIM_NOFILE, hard))
    return f"set the open-files limit of {pid} to {VICTIM_NOFILE}"


def _prlimit_same(pid: int) -> str:
    """The server's CPU limit set to what it is: the call that could kill it, made harmless."""
    resource.prlimit(pid, resource.RLIMIT_CPU, resource.prlimit(pid, resource.RLIMIT_CPU))
    return f"set the CPU limit of {pid}"


def _renice(pid: int) -> str:
    os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid))
    return f"reniced {pid}"


def _affinity(pid: int) -> str:
    os.sched_setaffinity(pid, os.sched_getaffinity(pid))
    return f"set the CPUs of {pid}"


def _scheduler(pid: int) -> str:
    os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
    return f"set the scheduler of {pid}"


def _sched_param(pid: int) -> str:
    os.sched_setparam(pid, os.sched_param(0))
    return f"set the scheduling parameters of {pid}"


class _SchedAttr(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("policy", ctypes.c_uint32),
        ("flags", ctypes.c_uint64),
        ("nice", ctypes.c_int32),
        ("priority", ctypes.c_uint32),
        ("deadline", ctypes.c_uint64 * 3),
    ]


def _sched_attr(pid: int) -> str:
    nice = os.getpriority(os.PRIO_PROCESS, pid)
    attr = _SchedAttr(ctypes.sizeof(_SchedAttr), os.SCHED_OTHER, 0, nice, 0)
    _syscall("sched_setattr", pid, ctypes.byref(attr), 0)
    return f"set the scheduling attributes of {pid}"


def _ioprio(pid: int) -> str:
    priority = _syscall("ioprio_get", IOPRIO_WHO_PROCESS, pid)
    _syscall("ioprio_set", IOPRIO_WHO_PROCESS, pid, priority)
    return f"set the I/O priority of {pid}"


def _move_pages(pid: int) -> str:
    _syscall("move_pages", pid, ctypes.c_ulong(0), None, None, None, 0)  # none: no harm
    return f"moved pages of {pid}"


def _migrate_pages(pid: int) -> str:
    nodes = ctypes.c_ulong(1)  # node 0 to node 0
    _syscall("migrate_pages", pid, ctypes.c_ulong(64), ctypes.byref(nodes), ctypes.byref(nodes))
    return f"migrated pages of {pid}"


def _forge(pid: int) -> str:
    from django_pdfpool.sandbox.wire import Extracted, encode_answer

    fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_NONBLOCK)
    forged = Extracted("0" * 64, 1, ["FORGED by another process"], {}, False)
    try:
        os.write(fd, encode_answer(forged))  # after its own "started"
    finally:
        os.close(fd)
    return f"forged the answer of {pid}"


def run(data: bytes) -> list[str]:
    """Every attempt the targets allow; the report is the one page, as JSON."""
    targets = json.loads(data.split(b"\n", 1)[1])
    report: dict[str, str] = {}
    if "victim" in targets:
        victim = targets["victim"]
        report["signal"] = attempt(lambda: _signal(victim))
        report["environ"] = attempt(lambda: _environ(victim))
        report["open_fd"] = attempt(lambda: _open_fd(victim))
        report["prlimit"] = attempt(lambda: _prlimit_victim(victim))
        report["affinity"] = attempt(lambda: _affinity(victim))
        report["scheduler"] = attempt(lambda: _scheduler(victim))
        report["sched_param"] = attempt(lambda: _sched_param(victim))
        report["sched_attr"] = attempt(lambda: _sched_attr(victim))
        report["ioprio"] = attempt(lambda: _ioprio(victim))
        report["move_pages"] = attempt(lambda: _move_pages(victim))
        report["migrate_pages"] = attempt(lambda: _migrate_pages(victim))
    if "server" in targets:
        report["server_environ"] = attempt(lambda: _environ(targets["server"]))
        report["signal_server"] = attempt(lambda: _signal(targets["server"]))
        report["prlimit_server"] = attempt(lambda: _prlimit_same(targets["server"]))
        report["renice_server"] = attempt(lambda: _renice(targets["server"]))
    report["ptrace_parent"] = attempt(_ptrace_parent)
    if "port" in targets:
        report["connect"] = attempt(lambda: _connect(targets["port"]))
    if "directory" in targets:
        report["create"] = attempt(lambda: _create(targets["directory"]))
    report["exec"] = attempt(_exec)
    report["execve"] = attempt(_execve)
    if "secret" in targets:
        report["read"] = attempt(lambda: _read(targets["secret"]))
    if "neighbour" in targets:
        report["neighbour"] = attempt(lambda: _read(targets["neighbour"]))
    if "planted" in targets:
        report["planted"] = attempt(lambda: _read(targets["planted"]))
    if "forge" in targets:
        report["forge"] = attempt(lambda: _forge(targets["forge"]))
    return [json.dumps(report)]
