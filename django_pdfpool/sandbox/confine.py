"""Child side: the sandbox layers a child puts on itself (once at start-up, then per job) and
the record of which ones this host gave it.

Set once (the template or a cold child, after its imports, inherited by every fork): no new
privileges, not dumpable, new user/network/IPC namespaces, a Landlock domain with no write,
no exec, no TCP and signals and abstract sockets scoped, and a seccomp filter. Per job (after
the job line, before the PDF): a Landlock domain of its own reading only the interpreter, its
packages and the job's file, and a seccomp filter with no signal to anyone and no new process.
Landlock through landlockpy, seccomp through libseccomp (pyseccomp); see docs/security.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from dataclasses import dataclass, field
from typing import Any

NO_NEW_PRIVS, NOT_DUMPABLE, NAMESPACES = "no_new_privs", "not_dumpable", "namespaces"
SECCOMP, LANDLOCK_FS, LANDLOCK_NET, LANDLOCK_SIGNAL = (
    "seccomp",
    "landlock_fs",
    "landlock_net",
    "landlock_signal",
)
_BASIC = (NO_NEW_PRIVS, NOT_DUMPABLE, SECCOMP)
_LANDLOCK = (*_BASIC, LANDLOCK_FS, LANDLOCK_NET, LANDLOCK_SIGNAL)
LAYERS = (*_LANDLOCK, NAMESPACES)
LEVELS: dict[str, tuple[str, ...]] = {  # PDFPOOL["SANDBOX_REQUIRE"]: the layers each demands
    "none": (),
    "basic": _BASIC,
    "landlock": _LANDLOCK,
    "full": (*_LANDLOCK, NAMESPACES),
}
LANDLOCK_ABI = {LANDLOCK_FS: 1, LANDLOCK_NET: 4, LANDLOCK_SIGNAL: 6}  # the ABI each needs
EXIT_SANDBOX = 71  # a child that could not put on a layer it was told to require

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = 0x08000000, 0x10000000, 0x40000000
CLONE_THREAD = 0x10000
# What an engine never needs, refused with EPERM from start-up on (the template too).
PROCESS_DENIED = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "execve", "execveat", "mount", "umount2", "pivot_root", "chroot", "setns", "unshare",
    "open_tree", "move_mount", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "name_to_handle_at",
    "open_by_handle_at", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "process_madvise", "quotactl", "swapon", "swapoff", "reboot", "acct",
    "personality",
)  # fmt: skip
# Refused to a job's child besides: signals to anyone (the kernel's SIGXCPU and alarm still
# come), pidfds, and new processes (a thread is still allowed).
JOB_DENIED = (
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_send_signal", "pidfd_open", "fork", "vfork",
)  # fmt: skip
# Read-only beneath these, besides the interpreter's prefixes and sys.path: the shared
# libraries a lazily imported extension module may load.
LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")
WRITABLE = ("/dev/null",)  # the one file a child may open for writing (before its job)


@dataclass
class Applied:
    """The layers a child put on itself, and the Landlock ABI it found (0: none)."""

    layers: set[str] = field(default_factory=set)
    landlock_abi: int = 0
    missing: dict[str, str] = field(default_factory=dict)  # layer -> why not


@dataclass
class _State:
    enabled: bool = False
    require: tuple[str, ...] = ()
    applied: Applied = field(default_factory=Applied)
    read_roots: tuple[str, ...] = ()
    job_filter: Any = None  # a pyseccomp.SyscallFilter built once, loaded in each job's child
    status_fd: int | None = None  # /proc/self/status, opened before the job's domain


_state = _State()


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _fail(layer: str, reason: str) -> None:
    _state.applied.missing.setdefault(layer, reason)
    if layer in _state.require:
        os._exit(EXIT_SANDBOX)


def _prctl(libc: Any, option: int, value: int, layer: str) -> None:
    if libc.prctl(option, value, 0, 0, 0) == 0:
        _state.applied.layers.add(layer)
    else:
        _fail(layer, os.strerror(ctypes.get_errno()))


def confine_process(require: tuple[str, ...] = ()) -> Applied:
    """Put on every layer set once for the process; a layer named in `require` that cannot be
    had ends the process (EXIT_SANDBOX). Call single-threaded, after the imports."""
    _state.enabled, _state.require = True, require
    _import_bindings()  # before any layer: pyseccomp looks for libseccomp with subprocesses
    libc = _libc()
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1, NO_NEW_PRIVS)
    _prctl(libc, PR_SET_DUMPABLE, 0, NOT_DUMPABLE)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) == 0:
        _state.applied.layers.add(NAMESPACES)
    else:
        _fail(NAMESPACES, os.strerror(ctypes.get_errno()))
    _state.read_roots = read_roots()
    _landlock(job_path=None)
    _seccomp_process()
    return _state.applied


def confine_job(path: str) -> None:
    """In a job's child, after its job line: a Landlock domain of its own reading only the
    read roots and `path`, and the job's seccomp filter. Raises OSError if a required layer
    cannot be put on (nothing of the PDF has been read)."""
    if not _state.enabled:
        return
    _state.status_fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
    _landlock(job_path=path)
    if _state.job_filter is not None:
        try:
            _state.job_filter.load()
        except OSError as exc:
            if SECCOMP in _state.require:
                raise
            _state.applied.missing.setdefault(SECCOMP, exc.strerror or "load failed")


def applied() -> Applied:
    """The layers this process put on itself so far."""
    return _state.applied


def status_fd() -> int | None:
    """/proc/self/status opened before the job's domain (which cannot open it), or None."""
    return _state.status_fd


def read_roots() -> tuple[str, ...]:
    """What a job's child may read: the interpreter's prefixes, sys.path (a checkout: only
    this package's directory, not the project beside it) and the shared libraries."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkout = os.path.dirname(package)
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, package, *LIBRARY_DIRS}
    for entry in sys.path:
        if entry and os.path.abspath(entry) != checkout:
            roots.add(os.path.abspath(entry))
    return tuple(sorted(root for root in roots if os.path.exists(root)))


def _import_bindings() -> None:
    for module in ("landlockpy", "pyseccomp"):
        with contextlib.suppress(Exception):  # missing, or no libseccomp: so is the layer
            __import__(module)


def _landlock(job_path: str | None) -> None:
    """The start-up domain (job_path None: no write but /dev/null, no exec, no TCP, scoped)
    or a job's (reads only the roots and the job's file)."""
    try:
        import landlockpy
        from landlockpy import AccessFS, AccessNet, Scope
    except ImportError:
        return _fail(LANDLOCK_FS, "landlockpy is not installed")
    abi = landlockpy.abi_version()
    _state.applied.landlock_abi = abi
    if abi < 1:
        return _fail(LANDLOCK_FS, "the kernel offers no Landlock")
    every = landlockpy.fs_for_abi(abi)
    read = AccessFS.READ_FILE | AccessFS.READ_DIR
    handled = every if job_path is not None else every & ~read
    try:
        with landlockpy.Ruleset(
            handled_fs=handled,
            handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
            scoped=Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET,
        ) as ruleset:
            if job_path is None:
                for path in WRITABLE:
                    ruleset.allow_path(path, AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV)
            else:
                for root in _state.read_roots:
                    allowed = read if os.path.isdir(root) else AccessFS.READ_FILE
                    ruleset.allow_path(root, allowed)
                ruleset.allow_path(job_path, AccessFS.READ_FILE)
            ruleset.restrict(no_new_privs=True)
    except OSError as exc:
        if job_path is not None and LANDLOCK_FS in _state.require:
            raise
        return _fail(LANDLOCK_FS, exc.strerror or "restrict failed")
    for layer, needs in LANDLOCK_ABI.items():
        if abi >= needs:
            _state.applied.layers.add(layer)
        else:
            _fail(layer, f"Landlock ABI {abi} < {needs}")
    return None


def _seccomp_process() -> None:
    """The start-up filter (PROCESS_DENIED) loaded; the job's (JOB_DENIED) built for later."""
    try:
        import pyseccomp as seccomp  # type: ignore[import-untyped]
    except Exception:  # not installed, or (RuntimeError) no libseccomp
        return _fail(SECCOMP, "pyseccomp or libseccomp is not installed")
    try:
        process = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in PROCESS_DENIED:
            _deny(seccomp, process, name)
        process.load()
        job = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in JOB_DENIED:
            _deny(seccomp, job, name)
        # clone() without CLONE_THREAD is a fork; clone3 answers ENOSYS (glibc falls back).
        job.add_rule(
            seccomp.ERRNO(errno.EPERM),
            "clone",
            seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0),
        )
        job.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        _state.job_filter = job
    except OSError as exc:
        return _fail(SECCOMP, exc.strerror or "seccomp failed")
    _state.applied.layers.add(SECCOMP)
    return None


def _deny(seccomp: Any, syscall_filter: Any, name: str) -> None:
    """EPERM for `name`, unless this architecture has no such system call."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        syscall_filter.add_rule(seccomp.ERRNO(errno.EPERM), name)
