"""A job's child is gone (killed and reaped) before its job returns, whatever the child does
after answering: the slot it held is memory until then."""

from __future__ import annotations

import os
import time

import pytest

import django_pdfpool.sandbox.extract as extraction
from tests.conftest import wait_until
from tests.support import pdfs
from tests.support.lingering import ENGINE, NAME
from tests.support.sandbox import run


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_child_that_answers_and_stays_is_gone_when_its_job_returns(warm):
    extraction.register_engine(ENGINE)
    extraction.configure(warm=False)  # a template started before the engine was registered goes
    extraction.configure(warm=True)
    seen = set()
    for attempt in range(50):
        began = time.monotonic()
        result = run(pdfs.simple([f"linger {attempt}"]), engine=ENGINE, warm=warm, timeout=60)
        assert time.monotonic() - began < 30  # the answer did not wait for the child's deadline
        (pid,) = result.pages
        assert not lingering(pid), "the child outlived its job"
        seen.add(result.child_start)
        if result.child_start == ("forked" if warm else "cold"):
            return
        wait_until(lambda: bool(extraction.idle_pids()), timeout=30)
    raise AssertionError(f"no {'forked' if warm else 'cold'} child took the job: {seen}")


def lingering(pid: str) -> bool:
    """Whether ``pid`` is still the lingering engine's child (not a process reusing its pid)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            return comm.read().strip() == NAME
    except (FileNotFoundError, ProcessLookupError):
        return False


def job_children() -> int:
    """The lingering engine's children on this host now, reaped or not (by their name)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm", "rb") as comm:
                count += comm.read().strip() == NAME
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
    return count


def forked_ready() -> None:
    """The template runs with the lingering engine loaded: jobs get forked children."""
    for attempt in range(50):
        if (
            run(pdfs.simple([f"ready {attempt}"]), engine=ENGINE, timeout=60).child_start
            == "forked"
        ):
            return
        wait_until(lambda: bool(extraction.idle_pids()), timeout=30)
    raise AssertionError("no forked child")


def test_live_job_children_never_outnumber_the_pools_slots():
    """Three jobs through a pool of one slot, each child answering and then lingering: the
    next job's child takes its job only once the last one is gone, counted by process."""
    import asyncio
    import threading

    from django_pdfpool.admission import Pool

    extraction.register_engine(ENGINE)
    forked_ready()
    pool, most, done = Pool(1, 2, 60.0), [job_children()], threading.Event()
    assert most[0] == 0, "children of the jobs before outlived them"

    def sample() -> None:
        while not done.is_set():
            most[0] = max(most[0], job_children())
            time.sleep(0.002)

    async def job(number: int) -> tuple[str, ...]:
        data = pdfs.simple([f"slot {number}"])

        async def fn() -> tuple[str, ...]:
            limits = {"timeout": 60, "memory_limit": 512 << 20}
            return tuple((await extraction.extract(data, engine=ENGINE, **limits)).pages)

        return await pool.run(f"linger:{number}", f"caller {number}", fn)

    async def three() -> list[tuple[str, ...]]:
        return await asyncio.gather(*(job(n) for n in range(3)))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        results = asyncio.run(three())
    finally:
        done.set()
        sampler.join()
    assert len({pid for (pid,) in results}) == 3  # three children, one after the other
    assert most[0] <= 1, f"{most[0]} job children alive at once with one slot"


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_stop_signal_to_every_process_of_the_server_ends_none_of_its_jobs(warm):
    """systemd stops a service by signalling every process of it (KillMode=control-group, the
    default) while the server drains: a job's child (and the template) takes no SIGTERM or
    SIGINT meant for the server, and the job still gets its text."""
    import asyncio
    import signal

    from tests.support.procs import child_pids, job_child

    extraction.configure(warm=warm)
    if warm:
        extraction.prewarm()
        wait_until(lambda: extraction.idle_pids() != [], timeout=30)
    memory = 512 << 20

    async def signalled() -> tuple[str, str]:
        mine = child_pids() - set(extraction.idle_pids())
        limits = {"timeout": 60.0, "memory_limit": memory, "warm": warm}
        task = asyncio.ensure_future(extraction.extract(pdfs.slow_pdf("signalled", 2), **limits))
        while job_child(child_pids() - mine - set(extraction.idle_pids()), memory) is None:
            assert not task.done()
            await asyncio.sleep(0.01)
        for pid in child_pids():  # the job's child, and the template with its ready children
            for number in (signal.SIGTERM, signal.SIGINT):
                os.kill(pid, number)
        result = await task
        return result.text, result.child_start

    try:
        text, start = asyncio.run(signalled())
        assert "signalled" in text and start == ("forked" if warm else "cold")
    finally:
        extraction.configure(warm=True)


EMBEDDED = """
import asyncio, sys
sys.executable = {binary!r}  # uWSGI's and mod_wsgi's: the server's binary, not a Python
from django_pdfpool.sandbox.extract import extract
from tests.support import pdfs
done = asyncio.run(extract(pdfs.simple(["embedded"]), timeout=60.0, memory_limit=512 << 20))
print(done.pages[0].strip())
"""


@pytest.mark.parametrize("binary", ["/usr/local/bin/uwsgi", ""])
def test_children_start_where_an_embedding_server_is_sys_executable(binary):
    """Under uWSGI (or mod_wsgi, or with no name at all) ``sys.executable`` is not a Python:
    the children run on the Python beside ``sys.exec_prefix``, and extract."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = EMBEDDED.format(binary=binary)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "embedded", done.stderr[-2000:]
