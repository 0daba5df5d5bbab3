"""Hostile and broken PDFs, built by tests/support/pdfs.py: each ends with its expected code, within
its deadline and memory limit, with the parent alive, no child process and no temporary file
left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import psutil
import pytest

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool import extract
from django_pdfpool.exceptions import EXTRACTION_MESSAGES as MESSAGES
from django_pdfpool.exceptions import ExtractionError, RunnerLost, Wording
from tests.sandbox.hostile_engines import LEAVE_GROUP
from tests.support import pdfs
from tests.support.lingering import SILENT_ENGINE
from tests.support.procs import PeakWatcher, child_pids, cpu_time, job_child, leftovers, rlimits

TIMEOUT = 15.0  # generous: under load a quick refusal must still beat its deadline
DEADLINE = {"timeout": 2.0}  # for the cases that are expected to run into it
WORK = 30.0  # for the cases that must finish seconds of real work: a loaded machine is slow
REFUSE_OVER_50 = {"max_pages": 50, "on_too_many_pages": "refuse"}
MEMORY = 256 << 20
MiB = 1 << 20

# name -> (build, expected code or "ok", extract() options, text expected on success)
CASES = {
    "empty file": (lambda: b"", "not_a_pdf", {}, None),
    "html renamed .pdf": (pdfs.html, "not_a_pdf", {}, None),
    "png renamed .pdf": (pdfs.png, "not_a_pdf", {}, None),
    "first half": (
        lambda: pdfs.truncated(pdfs.reportlab_pdf(["a", "b"]), "first"),
        "malformed",
        {},
        None,
    ),
    "second half": (
        lambda: pdfs.truncated(pdfs.reportlab_pdf(["a", "b"]), "second"),
        "not_a_pdf",
        {},
        None,
    ),
    "1 GB FlateDecode bomb": (pdfs.flate_bomb, "too_large", {}, None),
    "nested filters": (pdfs.nested_filters, "too_large", {}, None),
    "streams outgrowing memory": (
        pdfs.many_streams,
        "too_large",
        {"memory_limit": 128 * MiB},
        None,
    ),
    "CPU bomb of text operators": (pdfs.cpu_bomb, "too_complex", DEADLINE, None),
    "cyclic /Kids": (pdfs.cyclic_kids, "malformed", {}, None),
    "page is its own /Parent": (pdfs.own_parent, "malformed", {}, None),
    "circular /Prev": (pdfs.circular_prev, "ok", {}, "prev loop"),
    "AES-256, unknown password": (pdfs.aes256_unknown_password, "encrypted", {}, None),
    "self-drawing Form XObject": (pdfs.self_drawing_form, "ok", {}, "form"),
    "200,000 nested brackets": (pdfs.nested_brackets, "malformed", {}, None),
    "no /Root, huge /Size": (pdfs.no_root_huge_size, "malformed", {}, None),
    "20,000 pages": (pdfs.many_pages, "too_complex", DEADLINE, None),
    # Counting 20,000 pages (walking the page tree) takes pypdf about 1.5 s, idle.
    "20,000 pages, max_pages": (
        pdfs.many_pages,
        "ok",
        {"max_pages": 50, "timeout": WORK},
        "page",
    ),
    # Refused on the /Count the document declares, before any page is read.
    "20,000 pages, refused": (pdfs.many_pages, "too_many_pages", REFUSE_OVER_50, None),
    # A /Count that lies low: the page tree's walk counts them, and they are refused.
    "20,000 pages, /Count says 10, refused": (
        lambda: pdfs.many_pages(declared=10),
        "too_many_pages",
        {**REFUSE_OVER_50, "timeout": WORK},
        None,
    ),
    # A /Count that lies high is refused for what it claims (as pypdfium2 always did).
    "3 pages, /Count says 20,000, refused": (
        lambda: pdfs.many_pages(3, declared=20_000),
        "too_many_pages",
        REFUSE_OVER_50,
        None,
    ),
    "bogus /Length, past the end": (pdfs.bogus_length, "malformed", {}, None),
    "bogus /Length, a little off": (lambda: pdfs.bogus_length(300), "ok", {}, "bogus length"),
}


# pypdfium2 has no decompression caps: under RLIMIT_AS it dies by signal, which the child
# boundary absorbs and maps to too_large. It reads some broken structures pypdf refuses.
PDFIUM_CASES = {
    "empty file": "not_a_pdf",
    "html renamed .pdf": "not_a_pdf",
    "first half": "malformed",
    "1 GB FlateDecode bomb": "too_large",
    "nested filters": "too_large",
    "streams outgrowing memory": "too_large",
    "cyclic /Kids": "ok",
    "AES-256, unknown password": "encrypted",
    "no /Root, huge /Size": "malformed",
    "20,000 pages, max_pages": "ok",
    "20,000 pages, refused": "too_many_pages",
    "3 pages, /Count says 20,000, refused": "too_many_pages",
}


@pytest.fixture
def copies(tmp_path):
    """No template (every child is started cold); byte sources are copied into this dir."""
    directory = tmp_path / "copies"
    directory.mkdir()
    extraction.configure(warm=False, tmp_dir=directory)
    yield directory
    extraction.configure(warm=True, tmp_dir=None)


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_pdf(name, copies):
    check(name, "pypdf", CASES[name][1], copies)


@pytest.mark.parametrize("name", list(PDFIUM_CASES))
def test_hostile_pdf_pdfium(name, copies):
    pytest.importorskip("pypdfium2")
    check(name, "pypdfium2", PDFIUM_CASES[name], copies)


def check(name, engine, expected, copies):
    build, _, options, text = CASES[name]
    data = build()
    limits = {"timeout": TIMEOUT, "memory_limit": MEMORY, "engine": engine, **options}
    parent = psutil.Process()
    before, rss_before = child_pids(), parent.memory_info().rss
    started = time.monotonic()
    spares = frozenset(before)  # a test before may have left children with other limits
    with PeakWatcher(limit=limits["memory_limit"], before=spares) as watcher:
        try:
            result = asyncio.run(extract(data, **limits))
            code = "ok"
        except ExtractionError as error:
            result, code = error, error.code
    elapsed = time.monotonic() - started

    assert code == expected, getattr(result, "detail", "")
    assert elapsed < limits["timeout"] + 1.0  # the deadline holds
    assert watcher.peak <= limits["memory_limit"]  # the kernel's own peak for every child
    if result.peak_rss is not None:
        assert result.peak_rss <= limits["memory_limit"]
    assert parent.memory_info().rss - rss_before < 64 * MiB  # the parent did not bloat
    assert leftovers(before) == set()  # no child process, alive or zombie
    assert list(copies.iterdir()) == []  # no temporary file
    if code == "ok":
        assert result.page_count > 0
        if engine == "pypdf":
            assert text in result.text
        assert result.truncated == ("max_pages" in options)
    else:
        assert result.message == MESSAGES[code]
        assert str(copies) not in result.detail and "Traceback" not in result.detail


def test_limits_are_set_in_the_child_and_cancel_kills_it(copies):
    """While a job runs, the child's limits are the job's (address space, CPU seconds, no
    core files); cancelling the job kills and reaps the child before CancelledError."""
    before = child_pids()

    async def scenario():
        task = asyncio.create_task(extract(pdfs.cpu_long(), timeout=5.0, memory_limit=MEMORY))
        limits = {}
        for _ in range(500):
            await asyncio.sleep(0.01)
            if (pid := job_child(child_pids() - before, MEMORY)) is not None:
                limits = rlimits(pid)
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return limits, leftovers(before, timeout=0), list(copies.iterdir())

    limits, left, files = asyncio.run(scenario())
    assert limits["Max address space"] == str(MEMORY)
    assert limits["Max core file size"] == "0"
    assert 5 <= int(limits["Max cpu time"]) <= 5 + 2 + 1  # timeout + margin, from CPU used
    assert left == set()  # reaped before the cancellation went on
    assert files == []


def test_parent_keeps_serving_after_hostile_files(copies):
    for name in ("1 GB FlateDecode bomb", "cyclic /Kids", "AES-256, unknown password"):
        with pytest.raises(ExtractionError):
            asyncio.run(extract(CASES[name][0](), timeout=TIMEOUT, memory_limit=MEMORY))
    result = asyncio.run(extract(pdfs.simple(["still here"]), timeout=TIMEOUT, memory_limit=MEMORY))
    assert result.text == "still here"


@pytest.mark.parametrize(
    ("signum", "expected", "detail"),
    [
        # an unexplained death (SIGTERM is not one: children block it)
        (signal.SIGUSR1, "crashed", "SIGUSR1"),
        # pypdf is pure Python: a segfault is not about memory
        (signal.SIGSEGV, "crashed", "SIGSEGV"),
        (signal.SIGKILL, "too_large", "SIGKILL"),  # not ours: the kernel's OOM killer
        (signal.SIGXCPU, "too_complex", "SIGXCPU"),  # RLIMIT_CPU
        # a real-time signal has a number and no name
        (signal.SIGRTMIN + 6, "crashed", str(signal.SIGRTMIN + 6)),
    ],
)
def test_child_killed_by_a_signal(signum, expected, detail, copies):
    """A signal from outside, once the child has its job, maps to a code; nothing is left."""
    before = child_pids()

    timeout = 30.0  # generous: a child below the server's priority is slow to start on busy CPUs

    async def scenario():
        # seconds of work at flat memory: the cpu bomb could end on MEMORY before the poll
        task = asyncio.create_task(extract(pdfs.cpu_long(), timeout=timeout, memory_limit=MEMORY))
        deadline, pid, used = time.monotonic() + timeout, None, 0.0
        while time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.01)
            if pid is None:  # the job's child: its limits set (not a ready one, waiting)
                if (pid := job_child(child_pids() - before, MEMORY)) is not None:
                    used = cpu_time(pid) or 0.0
            elif (now := cpu_time(pid)) is not None and now - used >= 0.05:
                # at work on the PDF, so past STARTED: killed before it, the child would be
                # taken for one lost before its job, and the job given to another
                os.kill(pid, signum)
                break
        with pytest.raises(ExtractionError) as caught:
            await task
        return caught.value

    started = time.monotonic()
    error = asyncio.run(scenario())
    assert (error.code, error.detail) == (expected, detail)
    assert time.monotonic() - started < timeout - 5  # did not wait for the deadline
    assert leftovers(before) == set()
    assert list(copies.iterdir()) == []


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_child_silent_and_alive_after_its_output_ends_is_ended_at_the_deadline(warm, copies):
    """Killed by the parent at the deadline after its output ended: too_complex, like any
    deadline, not the OOM killer's SIGKILL (too_large)."""
    before = child_pids()
    extraction.register_engine(SILENT_ENGINE)
    options = {"timeout": 2.0, "memory_limit": MEMORY, "engine": SILENT_ENGINE, "warm": warm}
    with pytest.raises(ExtractionError) as caught:
        asyncio.run(extract(pdfs.simple(["silent"]), **options))
    assert (caught.value.code, caught.value.detail) == ("too_complex", "deadline")
    assert leftovers(before) == set()


def test_no_child_can_start(copies):
    """An interpreter that exits at once: the job is retried once, then refused 503
    ``runner_lost`` (the host's fault, not the PDF's: not a 422)."""
    before = child_pids()
    extraction.configure(python="/bin/false")
    try:
        with pytest.raises(RunnerLost) as caught:
            asyncio.run(extract(pdfs.simple(["x"]), timeout=TIMEOUT, memory_limit=MEMORY))
    finally:
        extraction.configure(python=sys.executable)
    assert (caught.value.status, str(caught.value)) == (503, Wording.RUNNER_LOST)
    assert caught.value.__notes__ == ["no extraction child could take the job"]
    assert leftovers(before) == set()
    assert list(copies.iterdir()) == []


def test_a_child_that_leaves_its_process_group_is_still_ended_at_the_deadline(copies):
    """Code run by a document moves the cold child into the server's process group, stops its
    alarm and sleeps: killed at the deadline all the same (a kill of its group alone missed it,
    and the job waited for the child's own 30 s)."""
    before = child_pids()
    extraction.register_engine(LEAVE_GROUP)
    options = {"timeout": 2.0, "memory_limit": MEMORY, "engine": LEAVE_GROUP, "warm": False}
    started = time.monotonic()
    with pytest.raises(ExtractionError) as caught:
        asyncio.run(extract(pdfs.simple(["away"]), **options))
    assert (caught.value.code, caught.value.detail) == ("too_complex", "deadline")
    assert time.monotonic() - started < 2.0 + TIMEOUT
    assert leftovers(before) == set()
