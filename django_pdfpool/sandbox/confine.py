"""Child side: the sandbox layers a child puts on itself, once at start-up (inherited by
every fork) and per job (after its job line, before the PDF), and which ones this host gave
it (the state below). Each layer: docs/security.md."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from ..bounds import one_of

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 4, 38, 22, 2
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = 0x08000000, 0x10000000, 0x40000000
CLONE_THREAD = 0x10000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # ioctls that type into a terminal (a child's: its server's)

NO_NEW_PRIVS, NOT_DUMPABLE, NAMESPACES = "no_new_privs", "not_dumpable", "namespaces"
SECCOMP, LANDLOCK_FS = "seccomp", "landlock_fs"
LANDLOCK_NET, LANDLOCK_SIGNAL = "landlock_net", "landlock_signal"
_BASIC = (NO_NEW_PRIVS, NOT_DUMPABLE, SECCOMP)
_LANDLOCK = (*_BASIC, LANDLOCK_FS, LANDLOCK_NET, LANDLOCK_SIGNAL)
LAYERS = (*_LANDLOCK, NAMESPACES)
# PDFPOOL["SANDBOX"]["REQUIRE"]: the layers each level demands
LEVELS = {"none": (), "basic": _BASIC, "landlock": _LANDLOCK, "full": LAYERS}
REQUIRE = one_of(LEVELS)  # the sandbox level below which extractions are refused
LANDLOCK_ABI = {LANDLOCK_FS: 1, LANDLOCK_NET: 4, LANDLOCK_SIGNAL: 6}  # the ABI each needs
EXIT_SANDBOX = 71  # a child that could not put on a layer it was told to require

# What an engine never needs, refused from start-up on (the template too).
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
    # memory outside RLIMIT_AS (docs/security.md): memfds, System V segments and queues
    "memfd_create", "memfd_secret", "shmget", "msgget",
)  # fmt: skip
# Refused to a job's child besides: signals to anyone, pidfds, new processes (not threads), pipes.
JOB_DENIED = (
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_send_signal", "pidfd_open", "fork", "vfork",
    "setpriority", "ioprio_set",  # "who" 0 can mean the caller's whole group or user
    "pipe", "pipe2",  # their buffers, a MiB each, are memory RLIMIT_AS does not count
)  # fmt: skip
# Refused to a job's child unless their first argument (a pid) is 0, itself: another process
# of the same user's limits, scheduling or memory placement (glibc's setrlimit: pid 0).
JOB_SELF_ONLY = (
    "prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
    "sched_setattr", "migrate_pages", "move_pages",
)  # fmt: skip
# The shared libraries a lazily imported extension module may load: readable by each job.
LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")
# The packages a child imports, readable by each job wherever they are installed.
ENGINE_PACKAGES = (
    "django_pdfpool", "pypdf", "pypdfium2", "pypdfium2_raw", "landlockpy", "pyseccomp",
)  # fmt: skip


@dataclass
class State:
    """This process's layers: those it put on, those missing and why, the Landlock ABI found;
    what start-up prepared for the job's layers, and the error preparing them."""

    enabled: bool = False
    require: tuple[str, ...] = ()
    layers: set[str] = field(default_factory=set)
    missing: dict[str, str] = field(default_factory=dict)  # layer -> why not
    landlock_abi: int = 0  # 0: no Landlock
    read_roots: tuple[str, ...] = ()
    job_filter: Any = None  # a reference to the job's seccomp filter (its sock_fprog)
    # The job's Landlock ruleset as start-up prepares it (no attr: no Landlock): what it handles,
    # the read roots' rules on descriptors opened once, and the rule its file's fd completes.
    ruleset_attr: Any = None  # landlockpy's struct landlock_ruleset_attr
    root_fds: list[int] = field(default_factory=list)  # kept by a forked child, until prepared
    root_rules: list[Any] = field(default_factory=list)  # struct landlock_path_beneath_attr
    file_rule: Any = None
    job_ruleset_fd: int | None = None  # made by prepare_job, enforced by confine_job
    status_fd: int | None = None  # /proc/self/status, opened before the job's domain
    prepare_error: OSError | None = None


state = State()


@functools.cache
def libc() -> Any:
    """The C library, its errno kept (looked up once: every fork inherits it)."""
    return ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    """struct sock_fprog: a seccomp filter's BPF program (its bytes, kept alive by the field)."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _fail(reason: str, *layers: str) -> None:
    for layer in layers:
        state.missing.setdefault(layer, reason)
        if layer in state.require:
            os._exit(EXIT_SANDBOX)


def _put_on(layer: str, result: int) -> None:
    """`layer` is had if the C call putting it on returned 0, else missing (errno says why)."""
    if result == 0:
        state.layers.add(layer)
    else:
        _fail(os.strerror(ctypes.get_errno()), layer)


def confine_process(require: tuple[str, ...] = ()) -> None:
    """Put on every layer set once for the process; a layer named in `require` that cannot be
    had ends the process (EXIT_SANDBOX). Call single-threaded, after the imports."""
    state.enabled, state.require = True, require
    _import_bindings()  # before any layer: pyseccomp looks for libseccomp with subprocesses
    _put_on(NO_NEW_PRIVS, libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    _put_on(NOT_DUMPABLE, libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
    _put_on(NAMESPACES, libc().unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC))
    state.read_roots = read_roots()
    _landlock()
    _seccomp_process()


def prepare_job() -> None:
    """Before the job line (a ready child's while it waits): the job's Landlock ruleset made,
    /proc/self/status opened, its seccomp filter loaded; only system calls on structures built
    at start-up, as a forked child copies each page it touches."""
    if not state.enabled:
        return
    try:
        if state.ruleset_attr is not None:
            from landlockpy import _syscall

            state.job_ruleset_fd = ruleset = _syscall.create_ruleset(state.ruleset_attr)
            for rule in state.root_rules:
                _syscall.add_path_beneath(ruleset, rule)
            for fd in state.root_fds:
                os.close(fd)
            state.root_fds = []
        state.status_fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        program = state.job_filter
        if program is not None and libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program, 0, 0):
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number))
    except OSError as exc:  # raised again by confine_job: the job is refused
        state.prepare_error = exc


def confine_job(path: str) -> None:
    """After prepare_job and the job line: the job's Landlock domain, reading only the read roots
    and `path`; OSError where the job cannot have a layer (no byte of the PDF is read)."""
    if state.prepare_error is not None:
        raise state.prepare_error
    ruleset, state.job_ruleset_fd = state.job_ruleset_fd, None
    if ruleset is None:
        return
    from landlockpy import _syscall

    directory = os.path.dirname(os.path.abspath(path))
    roots = [root for root in state.read_roots if not _beneath(directory, root)]
    try:
        if len(roots) < len(state.read_roots):
            # beneath a read root the job's neighbours (other staged PDFs) would be readable:
            # a ruleset of the other roots instead
            old, ruleset = ruleset, _syscall.create_ruleset(state.ruleset_attr)
            os.close(old)
            for fd, rule in zip(*_root_rules(roots), strict=True):
                _syscall.add_path_beneath(ruleset, rule)
                os.close(fd)
        job_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            state.file_rule.parent_fd = job_fd
            _syscall.add_path_beneath(ruleset, state.file_rule)
        finally:
            os.close(job_fd)
        _syscall.restrict_self(ruleset)
    finally:
        os.close(ruleset)


def _beneath(directory: str, root: str) -> bool:
    return directory == root or directory.startswith(root + os.sep)


def read_roots() -> tuple[str, ...]:
    """What a job's child may read (none beneath another): the interpreter's prefixes, the
    standard library and site directories, ENGINE_PACKAGES and LIBRARY_DIRS; never another
    sys.path entry (PYTHONPATH=/app would give the project's settings)."""
    import importlib.util
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *LIBRARY_DIRS, *site.getsitepackages()}
    paths = sysconfig.get_paths()
    roots.update(paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib"))
    if site.ENABLE_USER_SITE:
        roots.add(site.getusersitepackages())
    for name in ENGINE_PACKAGES:  # its directories (a module: its file), found, not imported
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            places = [] if spec is None else spec.submodule_search_locations or [spec.origin or ""]
            roots.update(place for place in places if place and os.path.isabs(place))
    found = sorted(os.path.abspath(root) for root in roots if root and os.path.exists(root))
    return tuple(r for r in found if not any(o != r and _beneath(r, o) for o in found))


# The libraries the bindings ask ctypes.util.find_library for, by their sonames: found with
# dlopen alone (find_library runs ldconfig and gcc in subprocesses: ~9 ms of a cold child).
_SONAMES = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}


def _import_bindings() -> None:
    import ctypes.util

    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        with contextlib.suppress(KeyError, OSError):
            ctypes.CDLL(_SONAMES[name])
            return _SONAMES[name]
        return real(name)

    ctypes.util.find_library = find_library
    try:
        with contextlib.suppress(Exception):  # missing, or no libseccomp: so is the layer
            import pyseccomp  # type: ignore[import-untyped]  # noqa: F401
        with contextlib.suppress(Exception):  # missing; else it finds libc at its first call
            import landlockpy

            landlockpy.abi_version()
    finally:
        ctypes.util.find_library = real


def _landlock() -> None:
    """The start-up domain: no write but /dev/null, no exec, no TCP bind or connect, signals
    and abstract unix sockets scoped to the domain (reads are left to each job's domain)."""
    try:
        import landlockpy
        from landlockpy import AccessFS, AccessNet, Scope, _syscall
    except ImportError:
        return _fail("landlockpy is not installed", *LANDLOCK_ABI)
    abi = landlockpy.abi_version()
    state.landlock_abi = abi
    if abi < 1:
        return _fail("the kernel offers no Landlock", *LANDLOCK_ABI)
    fs, read = landlockpy.fs_for_abi(abi), AccessFS.READ_FILE | AccessFS.READ_DIR
    net = (AccessNet.BIND_TCP | AccessNet.CONNECT_TCP) & landlockpy.net_for_abi(abi)
    scoped = (Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET) & landlockpy.scope_for_abi(abi)
    ruleset = landlockpy.Ruleset(handled_fs=fs & ~read, handled_net=net, scoped=scoped)
    try:
        with ruleset:
            # the one file a child may open for writing
            ruleset.allow_path("/dev/null", AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV)
            ruleset.restrict(no_new_privs=True)
    except OSError as exc:
        return _fail(exc.strerror or "restrict failed", *LANDLOCK_ABI)
    # The job's: built here, so that a job's child makes only system calls.
    state.ruleset_attr = _syscall.RulesetAttr(int(fs), int(net), int(scoped))
    state.file_rule = _syscall.PathBeneathAttr(int(AccessFS.READ_FILE), -1)
    state.root_fds, state.root_rules = _root_rules(state.read_roots)
    for layer, needs in LANDLOCK_ABI.items():
        if abi >= needs:
            state.layers.add(layer)
        else:
            _fail(f"Landlock ABI {abi} < {needs}", layer)


def _root_rules(roots: Any) -> tuple[list[int], list[Any]]:
    """Each root that can be opened: its O_PATH descriptor and its read rule."""
    from landlockpy import AccessFS, _syscall

    read_file = int(AccessFS.READ_FILE)
    read = read_file | int(AccessFS.READ_DIR)
    fds, rules = [], []
    for root in roots:
        try:
            fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        fds.append(fd)
        rules.append(_syscall.PathBeneathAttr(read if os.path.isdir(root) else read_file, fd))
    return fds, rules


def _seccomp_process() -> None:
    """The start-up filter (PROCESS_DENIED) loaded; the job's (JOB_DENIED) built for later."""
    try:
        import pyseccomp as seccomp
    except Exception:  # not installed, or (RuntimeError) no libseccomp
        return _fail("pyseccomp or libseccomp is not installed", SECCOMP)
    try:
        process = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in PROCESS_DENIED:
            _deny(seccomp, process, name)
        for request in (TIOCSTI, TIOCLINUX):  # the server's terminal; the kernel reads 32 bits
            _deny(seccomp, process, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
        process.load()
        job = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in JOB_DENIED:
            _deny(seccomp, job, name)
        for name in JOB_SELF_ONLY:
            _deny(seccomp, job, name, seccomp.Arg(0, seccomp.NE, 0))
        # clone() without CLONE_THREAD is a fork; clone3 answers ENOSYS (glibc falls back).
        no_thread = seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0)
        job.add_rule(seccomp.ERRNO(errno.EPERM), "clone", no_thread)
        job.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        read, write = os.pipe()  # the BPF program, as libseccomp would load it
        with open(read, "rb") as reader:
            with open(write, "wb") as writer:
                job.export_bpf(writer)
            program = reader.read()
        state.job_filter = ctypes.byref(_SockFprog(len(program) // 8, program))
    except OSError as exc:
        return _fail(exc.strerror or "seccomp failed", SECCOMP)
    state.layers.add(SECCOMP)


def _deny(seccomp: Any, syscall_filter: Any, name: str, *args: Any) -> None:
    """EPERM for `name` where `args` hold, unless this architecture lacks that system call."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        syscall_filter.add_rule(seccomp.ERRNO(errno.EPERM), name, *args)
