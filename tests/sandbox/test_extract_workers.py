"""The threads that hold jobs' conversations with their children: kept between
jobs, so that a job does not wait for a new thread; gone after their idle time; and named so
that a thread at rest is never counted as one at work."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from django_pdfpool import extract
from django_pdfpool.sandbox import extract as sandbox
from tests.support import pdfs

LIMITS = {"timeout": 10.0, "memory_limit": 256 << 20}


def named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, [t.name for t in threading.enumerate()]
        time.sleep(0.02)


@pytest.fixture
def idle_for():
    """Set the workers' idle time; back to the default afterwards. First, until the jobs of
    earlier tests (one may run to its timeout after its caller left) and their kept threads
    are gone: these tests count the threads by name."""
    before = sandbox._workers.idle
    sandbox._workers.idle = 0.05  # a thread kept from before leaves at once
    until(lambda: not named("pdfpool-extract") and not named("pdfpool-idle"), timeout=120.0)

    def setting(seconds: float) -> None:
        sandbox._workers.idle = seconds

    yield setting
    sandbox._workers.idle = 0.05  # the kept threads leave now, each woken with nothing to do
    for _ in range(sandbox._workers._waiting):
        sandbox._workers.run(Nothing())
    until(lambda: not named("pdfpool-idle"))
    sandbox._workers.idle = before


class Nothing:
    """A job that does nothing: it wakes a kept thread, which then waits its idle time."""

    def run(self) -> None:
        pass


def test_a_second_job_runs_on_the_first_jobs_thread_and_starts_none(idle_for):
    idle_for(30.0)
    ran_on: list[int] = []
    original = sandbox._Job.run

    def recording(*args):
        ran_on.append(threading.get_ident())
        original(*args)

    starts: list[str] = []
    start = threading.Thread.start

    def counting(thread: threading.Thread) -> None:
        starts.append(thread.name)
        start(thread)

    sandbox._Job.run = recording
    threading.Thread.start = counting  # type: ignore[method-assign]
    try:
        first = asyncio.run(extract(pdfs.simple(["one"]), **LIMITS))
        until(lambda: len(named("pdfpool-idle")) == 1)  # the first job's thread, waiting
        second = asyncio.run(extract(pdfs.simple(["two"]), **LIMITS))
    finally:
        sandbox._Job.run = original
        threading.Thread.start = start  # type: ignore[method-assign]
    assert (first.pages, second.pages) == (("one",), ("two",))
    assert len(ran_on) == 2 and ran_on[0] == ran_on[1]
    assert starts.count("pdfpool-extract") == 1


def test_a_waiting_thread_is_not_at_work_and_leaves_after_its_idle_time(idle_for):
    idle_for(5.0)

    async def jobs() -> list:
        return await asyncio.gather(
            *(extract(pdfs.simple([f"job {i}"]), **LIMITS) for i in range(3))
        )

    results = asyncio.run(jobs())
    assert [r.pages for r in results] == [(f"job {i}",) for i in range(3)]
    until(lambda: not named("pdfpool-extract"), timeout=3.0)  # at rest, while still kept
    assert named("pdfpool-idle")
    until(lambda: not named("pdfpool-idle"))  # and the kept ones leave


def test_a_kept_thread_holds_nothing_of_its_last_job(idle_for):
    """A waiting thread keeps no reference to the bytes of the job it ran (an upload can be
    as large as MAX_UPLOAD_SIZE): neither of its first job nor of a later one."""
    import gc
    import weakref

    idle_for(30.0)  # the first job gets a new thread: its first one
    for text in ("first", "second"):
        source = memoryview(pdfs.simple([text]))  # bytes take no weak reference
        watched = weakref.ref(source)
        assert asyncio.run(extract(source, **LIMITS)).pages == (text,)
        del source
        until(lambda: bool(named("pdfpool-idle")))
        gc.collect()
        assert watched() is None, text
