"""Child side: the kernel's structures and calls the sandbox makes itself (prctl, Landlock's
three system calls, seccomp), through ctypes, on structures built once at start-up."""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 4, 38, 22, 2
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # on every architecture
RULE_PATH_BENEATH = 1
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = 0x08000000, 0x10000000, 0x40000000
CLONE_THREAD = 0x10000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # ioctls that type into a terminal


@functools.cache
def libc() -> Any:
    """The C library, its errno kept (looked up once: every fork inherits it)."""
    found = ctypes.CDLL(None, use_errno=True)
    found.syscall.restype = ctypes.c_long
    return found


class SockFprog(ctypes.Structure):
    """struct sock_fprog: a seccomp filter's BPF program."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class RulesetAttr(ctypes.Structure):
    """struct landlock_ruleset_attr up to ABI 6's `scoped` (zeros where the ABI lacks it)."""

    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class PathBeneath(ctypes.Structure):
    """struct landlock_path_beneath_attr (packed)."""

    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def syscall(number: int, *args: Any) -> int:
    """syscall(2); OSError on failure."""
    return _checked(int(libc().syscall(number, *args)))


def _checked(result: int) -> int:
    """`result`, or OSError for the errno a call that failed (-1) left."""
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result


def create_ruleset(attr: RulesetAttr) -> int:
    """landlock_create_ruleset(2): a new ruleset's descriptor."""
    return syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)


def add_rule(ruleset: int, rule: PathBeneath) -> None:
    """landlock_add_rule(2) of a path-beneath rule."""
    syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0)


def restrict_self(ruleset: int) -> None:
    """landlock_restrict_self(2): this thread (and what it forks) in the ruleset's domain."""
    syscall(SYS_RESTRICT_SELF, ruleset, 0)


def load_filter(program: Any) -> None:
    """prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program): a reference to a SockFprog."""
    _checked(libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program, 0, 0))
