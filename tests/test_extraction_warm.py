"""Warm spares: started lazily, one job each, replaced when used or dead, bounded, turned off
by a setting, ended by shutdown() and never outliving their parent."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from django_pdfpool import extraction
from django_pdfpool.extraction import extract
from django_pdfpool.sandbox import spares as spares_module
from django_pdfpool.sandbox.spares import WarmChildren
from tests import pdfs
from tests.procs import CHILD_MARK, child_pids, leftovers, rlimits

LIMITS = {"timeout": 10.0, "memory_limit": 256 << 20}
ROOT = Path(__file__).resolve().parents[1]


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def gone(pid: int) -> bool:
    """Exited and reaped (or, for another process's child, at least exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :].startswith(b"Z") and pid not in child_pids()


def one_spare() -> int:
    wait_for(lambda: len(extraction.spare_pids()) == 1)
    return extraction.spare_pids()[0]


@pytest.fixture
def spares():
    extraction.shutdown()
    before = child_pids()
    yield extraction.configure
    extraction.shutdown()
    assert leftovers(before) == set()
    extraction.configure(spares=1)


def run(data=None, **options):
    data = pdfs.simple(["warm"]) if data is None else data
    return asyncio.run(extract(data, **{**LIMITS, **options}))


def test_spares_start_lazily_and_serve_one_job_each(spares):
    spares(spares=1)
    assert extraction.spare_pids() == []  # nothing before the first job
    assert run().text == "warm"
    first = one_spare()
    cmdline = Path(f"/proc/{first}/cmdline").read_bytes()
    assert CHILD_MARK in cmdline and b"--warm-up" in cmdline
    assert rlimits(first)["Max address space"] == "unlimited"  # limits come with the job
    assert run().text == "warm"
    wait_for(lambda: gone(first))  # it took the job, and exited after it
    second = one_spare()
    assert second != first


def test_prewarm_starts_spares_before_any_job(spares):
    spares(spares=2)
    extraction.prewarm()
    wait_for(lambda: len(extraction.spare_pids()) == 2)


def test_dead_spare_is_replaced(spares):
    spares(spares=1)
    extraction.prewarm()
    dead = one_spare()
    os.kill(dead, signal.SIGKILL)
    assert run().text == "warm"  # served by a fresh child
    wait_for(lambda: gone(dead))  # reaped, not a zombie of ours
    assert one_spare() != dead


def test_spares_are_bounded(spares):
    spares(spares=2)
    extraction.prewarm()
    seen = []

    async def scenario():
        jobs = [asyncio.create_task(extract(pdfs.simple([f"job {n}"]), **LIMITS)) for n in range(6)]
        while not all(job.done() for job in jobs):
            seen.append(len(extraction.spare_pids()))
            await asyncio.sleep(0.002)
        return [job.result().text for job in jobs]

    assert asyncio.run(scenario()) == [f"job {n}" for n in range(6)]
    wait_for(lambda: len(extraction.spare_pids()) == 2)  # the replacements are ready
    seen.append(len(extraction.spare_pids()))
    assert max(seen) <= 2


class FakeChild:
    """A spare that gets ready only when its gate opens (no process)."""

    def __init__(self, gate: threading.Event, made: list) -> None:
        self.gate, self.pid = gate, 100_000 + len(made)
        made.append(self)

    def wait_ready(self, timeout: float) -> bool:
        return self.gate.wait(timeout)

    def alive(self) -> bool:
        return True


def test_spares_fewer_while_they_start_keeps_only_the_new_number(monkeypatch):
    """configure(spares=n) lowered while spares are starting: those that get ready beyond
    the new number are ended, not kept."""
    gate, made, dropped = threading.Event(), [], []
    monkeypatch.setattr(spares_module, "Child", lambda *args, **kw: FakeChild(gate, made))
    monkeypatch.setattr(spares_module, "drop", dropped.append)
    warm = WarmChildren(spares=3)
    try:
        warm.refill()
        wait_for(lambda: len(made) == 3)  # three starting, none ready
        warm.resize(1)
    finally:
        gate.set()  # now they are ready
    wait_for(lambda: len(warm.pids()) + len(dropped) == 3)  # each kept or ended
    assert len(warm.pids()) == 1
    assert sorted(warm.pids() + [child.pid for child in dropped]) == [c.pid for c in made]


def test_spares_off(spares):
    before = child_pids()
    spares(spares=0)
    extraction.prewarm()
    assert run().text == "warm"
    # The job's child exits; a spare would have been started by now (at the answer) and
    # would still be there: every child of ours ends, and no spare is waiting.
    wait_for(lambda: not child_pids() - before)
    assert extraction.spare_pids() == []
    assert run(warm=False).text == "warm"  # and per call, whatever the setting


def test_shutdown_ends_spares(spares):
    spares(spares=2)
    extraction.prewarm()
    wait_for(lambda: len(extraction.spare_pids()) == 2)
    pids = extraction.spare_pids()
    extraction.shutdown()
    assert extraction.spare_pids() == []
    assert all(gone(pid) for pid in pids)


def test_pdfium_jobs_make_spares_preload_it(spares):
    pytest.importorskip("pypdfium2")
    spares(spares=1)
    run(engine="pypdfium2")
    wait_for(
        lambda: (
            extraction.spare_pids()
            and b"pypdfium2" in Path(f"/proc/{extraction.spare_pids()[0]}/cmdline").read_bytes()
        )
    )
    assert run(engine="pypdfium2").text == "warm"
    assert run(engine="pypdf").text == "warm"  # a spare serves either engine


SCRIPT = """
import os, signal, sys, time
from django_pdfpool import extraction
extraction.configure(spares=2)
extraction.prewarm()
while len(extraction.spare_pids()) < 2:
    time.sleep(0.01)
print(*extraction.spare_pids(), flush=True)
how = sys.argv[1]
if how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "os_exit":
    os._exit(0)
"""


@pytest.mark.parametrize("how", ["normal exit", "os_exit", "sigkill"])
def test_spares_do_not_outlive_their_parent(how):
    """atexit ends them; without atexit, EOF on their stdin does."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), how.replace(" ", "_")],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    pids = [int(pid) for pid in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr.decode()[-2000:]
    wait_for(lambda: all(gone(pid) for pid in pids), timeout=5)


FORK_SCRIPT = """
import asyncio, os, time
from django_pdfpool import extraction
from tests import pdfs
extraction.prewarm()
while not extraction.spare_pids():
    time.sleep(0.01)
spare = extraction.spare_pids()[0]
pid = os.fork()  # as a pre-forking server does with its workers
if pid == 0:
    ok = extraction.spare_pids() == []  # the parent's spare is not the worker's to use
    text = asyncio.run(extraction.extract(pdfs.simple(["forked"]), timeout=10,
                                          memory_limit=256 << 20)).text
    print("worker", ok, text, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", extraction.spare_pids() == [spare] and os.path.exists(f"/proc/{spare}"))
"""


def test_forked_worker_leaves_the_parents_spares_alone():
    proc = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT], cwd=ROOT, capture_output=True, timeout=60, text=True
    )
    assert proc.stdout.split("\n")[:2] == ["worker True forked", "parent True"], proc.stderr
