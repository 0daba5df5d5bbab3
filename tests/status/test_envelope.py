"""The memory envelope's readers against files laid out as /proc and /sys/fs/cgroup are
(written into a temporary directory: the real cgroup files are only ever read)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from django_pdfpool.sandbox.children import recent_peaks
from django_pdfpool.status.envelope import envelope, memory_allowed, tree_rss

GiB = 1 << 30
NO_LIMIT = "9223372036854771712"  # cgroup v1's "none"


def layout(root, cgroup: str, files: dict[str, str] | None = None, meminfo_gib: int = 16):
    """``root/proc`` and ``root/sys``: this process's cgroup lines, MemTotal, and ``files``
    (a path under sys -> its content)."""
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text(cgroup)
    (root / "proc" / "meminfo").write_text(f"MemTotal: {meminfo_gib << 20} kB\nMemFree: 1 kB\n")
    for name, content in (files or {}).items():
        path = root / "sys" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    return str(root / "proc"), str(root / "sys")


def test_cgroup_v1_hybrid_the_memory_controllers_limit(tmp_path):
    lines = "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n"  # as on this project's machine
    own = "memory/process_api/abc/memory.limit_in_bytes"
    files = {own: str(GiB), "memory/memory.limit_in_bytes": NO_LIMIT, "unified/x": ""}
    proc, sys_fs = layout(tmp_path, lines, files)
    assert memory_allowed(proc, sys_fs) == (GiB, f"{sys_fs}/{own}")


def test_cgroup_v1_without_a_limit_is_memtotal(tmp_path):
    proc, sys_fs = layout(tmp_path, "4:memory:/a\n", {"memory/a/memory.limit_in_bytes": NO_LIMIT})
    assert memory_allowed(proc, sys_fs) == (16 * GiB, f"MemTotal in {proc}/meminfo")


def test_cgroup_v2_an_ancestors_limit_holds_when_it_is_the_least(tmp_path):
    files = {"pods/web/worker/memory.max": "max", "pods/web/memory.max": str(2 * GiB)}
    proc, sys_fs = layout(tmp_path, "0::/pods/web/worker\n", {**files, "pods/memory.max": "3"})
    assert memory_allowed(proc, sys_fs) == (3, f"{sys_fs}/pods/memory.max")
    (tmp_path / "sys" / "pods" / "memory.max").write_text("max\n")
    assert memory_allowed(proc, sys_fs) == (2 * GiB, f"{sys_fs}/pods/web/memory.max")


def test_a_limit_above_the_machines_memory_is_the_machines(tmp_path):
    proc, sys_fs = layout(tmp_path, "0::/big\n", {"big/memory.max": str(4 * GiB)}, 1)
    assert memory_allowed(proc, sys_fs) == (GiB, f"MemTotal in {proc}/meminfo")


def test_no_cgroup_file_is_memtotal(tmp_path):
    proc, sys_fs = layout(tmp_path, "")
    assert memory_allowed(proc, sys_fs) == (16 * GiB, f"MemTotal in {proc}/meminfo")


def test_without_proc_nothing_is_known_and_nothing_raises(tmp_path):
    """Where there is no /proc (not Linux), the envelope is unknown: no limit, no RSS."""
    missing = str(tmp_path / "missing")
    assert memory_allowed(missing, missing) == (0, "unknown")
    assert tree_rss(os.getpid(), missing) == (0, 0, 0)


GRANDPARENT = """import subprocess, sys
sleeper = subprocess.Popen(["sleep", "60"])
print("ok", flush=True)
sys.stdin.read()
sleeper.kill()
sleeper.wait()
"""


def test_the_tree_counts_children_and_grandchildren():
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    with subprocess.Popen([sys.executable, "-c", GRANDPARENT], **pipes) as child:
        assert child.stdout.readline() == b"ok\n"
        server, count, children = tree_rss(os.getpid())
        assert count >= 2 and children > 0 and server > 0
        assert tree_rss(child.pid)[1] == 1  # the sleep
        child.stdin.close()  # it ends the sleep, then itself


@pytest.fixture
def switching():
    """Threads switched as often as the interpreter allows; the recent jobs kept as they were."""
    interval, kept = sys.getswitchinterval(), list(recent_peaks)
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        recent_peaks.clear()
        recent_peaks.extend(kept)


def test_the_envelope_reads_the_recent_jobs_while_job_threads_add_to_them(switching):
    """Job threads append to ``recent_peaks`` while a status page reads it: every read whole."""
    done = threading.Event()

    def jobs_ending() -> None:
        while not done.is_set():
            recent_peaks.append((time.time(), 1 << 20, "pypdf"))

    recent_peaks.extend([(time.time(), 1 << 20, "pypdf")] * (recent_peaks.maxlen or 64))
    appender = threading.Thread(target=jobs_ending, daemon=True)
    appender.start()
    try:
        for _ in range(1000):
            assert len(envelope(2, 256 << 20)["recent_jobs"]) == recent_peaks.maxlen
    finally:
        done.set()
        appender.join()
