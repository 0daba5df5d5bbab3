"""Test-only engines (registered by the tests): what code run by a hostile PDF inside a job's
child could do to its parent's hold on it."""

from __future__ import annotations

import os
import signal
import time

from django_pdfpool.sandbox.engines import WARM_UP_PDF

LEAVE_GROUP = "tests.sandbox.hostile_engines:leave_group_and_stay"


def leave_group_and_stay(data: bytes) -> list[str]:
    """Moves into its parent's process group, stops its own alarm, then sleeps 30 s."""
    if data != WARM_UP_PDF:
        os.setpgid(0, os.getpgid(os.getppid()))
        signal.alarm(0)
        time.sleep(30)
    return [str(os.getpid())]


HOARD = "tests.sandbox.hostile_engines:hoard"
IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0
F_SETPIPE_SZ = 1031


def hoard(data: bytes) -> list[str]:
    """Holds the MiB its document names (``%PDF-hoard <MiB>``) outside its address space: in
    a memfd it writes to, in System V segments it fills and leaves behind (in its IPC
    namespace, which outlives it), and in pipes it fills (as many as its open-files limit
    allows). One JSON page: each attempt "escaped: ..." or "refused: ERRNO"."""
    import contextlib
    import ctypes
    import errno
    import fcntl
    import json

    if data == WARM_UP_PDF:
        return ["{}"]
    size = int(data.split()[1]) << 20
    chunk, report = b"\1" * (1 << 20), {}
    try:
        fd = os.memfd_create("hoard")
        for _ in range(size >> 20):
            os.write(fd, chunk)
        report["memfd"] = f"escaped: {os.fstat(fd).st_size >> 20} MiB"
    except OSError as exc:
        report["memfd"] = f"refused: {errno.errorcode.get(exc.errno or 0)}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    segments = []
    for _ in range(size >> 22):  # 4 MiB segments, each attached, filled and detached
        segment = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(1 << 22), IPC_CREAT | 0o600)
        if segment < 0:
            report["shm"] = f"refused: {errno.errorcode.get(ctypes.get_errno())}"
            break
        address = libc.shmat(segment, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            report["shm"] = f"error: shmat {errno.errorcode.get(ctypes.get_errno())}"
            break
        ctypes.memset(address, 1, 1 << 22)
        libc.shmdt(ctypes.c_void_p(address))
        segments.append(segment)
    else:
        report["shm"] = f"escaped: segments {segments}"
    held, pipes = 0, []
    try:
        while held < size:
            pipes.append(os.pipe())
            with contextlib.suppress(OSError):
                fcntl.fcntl(pipes[-1][1], F_SETPIPE_SZ, 1 << 20)
            os.set_blocking(pipes[-1][1], False)
            with contextlib.suppress(BlockingIOError):
                while held < size:
                    held += os.write(pipes[-1][1], chunk)
    except OSError as exc:  # out of descriptors, or refused
        report["pipes"] = f"refused: {errno.errorcode.get(exc.errno or 0)}"
    if held:
        report["pipes"] = f"escaped: {held >> 20} MiB"
    return [json.dumps(report)]


MOST_PAGES = "tests.sandbox.hostile_engines:most_pages"


def most_pages(data: bytes) -> list[str]:
    """As many pages, of 80 digits each, as an answer may hold (MAX_ANSWER_PAGES)."""
    from django_pdfpool.sandbox.wire import MAX_ANSWER_PAGES

    return [f"{n:080d}" for n in range(MAX_ANSWER_PAGES)]
