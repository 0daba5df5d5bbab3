"""Children forked from the template: as isolated as cold ones (limits, descriptors,
environment, signal handling, session), and a template killed mid-burst costs no job."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import select
import signal
import threading
import time
from pathlib import Path

import pytest

from django_pdfpool import extract
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox import wire
from django_pdfpool.sandbox.children import FORK_TIMEOUT
from tests.conftest import until, wait_until
from tests.support import pdfs
from tests.support.procs import child_pids, job_child, leftovers, rlimits

MEMORY = 300 << 20
PIDFD_GETFD = 438  # the syscall's number on every Linux architecture
LIMITS = {"timeout": 60.0, "memory_limit": MEMORY}  # nice'd children beside busy CPUs


@pytest.fixture
def warm(tmp_path):
    sandbox.configure(warm=True, tmp_dir=tmp_path)
    sandbox.prewarm()
    wait_until(lambda: sandbox.idle_pids() != [], timeout=30)
    before = child_pids()
    yield sandbox.idle_pids()[0]
    assert leftovers(before) == set()
    assert list(tmp_path.iterdir()) == []
    sandbox.configure(tmp_dir=None)


def forked_children(template: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{template}/task/{template}/children").read_text().split()]


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def alive(pid: int) -> bool:
    """Whether the process is there and has not exited (a zombie has)."""
    try:
        return status(pid)["State"][0] not in "ZX"
    except OSError:
        return False


def inspect_while_busy(warm_call: bool) -> dict:
    """Start a job of seconds, look at its child once it has set its limits, then cancel."""
    seen: dict = {}

    async def scenario():
        mine = set(child_pids()) - set(sandbox.idle_pids())  # a ready child may take it
        task = asyncio.ensure_future(extract(pdfs.slow_pdf("busy", 3), warm=warm_call, **LIMITS))

        def working() -> int | None:  # once its limits are all set, the last one included
            return job_child(child_pids() - mine - set(sandbox.idle_pids()), MEMORY)

        while (pid := working()) is None:
            assert not task.done()
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + 10  # its document, opened and read as its job starts
        while len(os.listdir(f"/proc/{pid}/fd")) > 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # an fd it inherited stays: seen below
        seen.update(
            pid=pid,
            limits=rlimits(pid),
            fds=sorted(os.listdir(f"/proc/{pid}/fd"), key=int),
            targets=[os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2, 3)],
            environ=Path(f"/proc/{pid}/environ").read_bytes(),
            status=status(pid),
            session=os.getsid(pid),
            group=os.getpgid(pid),
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    return seen


def test_a_forked_child_is_as_isolated_as_a_cold_one(warm):
    forked = inspect_while_busy(warm_call=True)
    cold = inspect_while_busy(warm_call=False)
    assert sandbox.child_starts().template_pid == warm
    assert forked["pid"] in forked_children(warm) or not Path(f"/proc/{forked['pid']}").exists()
    for seen in (forked, cold):
        # nothing inherited; 3 is its own /proc status, opened before its job's sandbox
        assert seen["fds"] == ["0", "1", "2", "3"], seen["fds"]
        assert seen["targets"][3] == f"/proc/{seen['pid']}/status"
        assert seen["targets"][0].startswith("pipe:") and seen["targets"][1].startswith("pipe:")
        assert seen["targets"][2] == "/dev/null"
        assert seen["limits"]["Max address space"] == str(MEMORY)
        assert seen["limits"]["Max cpu time"] != "unlimited"
        assert seen["limits"]["Max core file size"] == "0"
        assert seen["group"] == seen["pid"]  # its own process group, killed whole
        assert seen["session"] == os.getsid(0)  # the server's session (see child_main)
    assert forked["environ"] == Path(f"/proc/{warm}/environ").read_bytes()
    assert sorted(forked["environ"].split(b"\0")) == sorted(cold["environ"].split(b"\0"))
    for mask in ("SigCgt", "SigIgn", "SigBlk"):  # the template's own SIGTERM handler is gone
        assert forked["status"][mask] == cold["status"][mask], mask
    assert not int(forked["status"]["SigCgt"], 16) & (1 << (signal.SIGTERM - 1))


def test_a_retired_templates_running_child_finishes_however_late_the_kill_lands(warm, monkeypatch):
    """A new template is wanted (another nice) while a forked child runs a job: the old one
    is retired and ended. Its running child goes on, even with the server's thread slow to
    kill it (held back 0.3 s here): a template that saw its socket closed first would end
    every child it has on the way out."""
    from django_pdfpool.sandbox import children

    real_drop = children.drop

    def slow_drop(child: children.Handle) -> None:
        if child.pid == warm:
            threading.Event().wait(0.3)  # the server's thread, preempted before the kill
        real_drop(child)

    async def scenario() -> str:
        mine = child_pids() - set(sandbox.idle_pids())
        task = asyncio.ensure_future(extract(pdfs.slow_pdf("still read", 1), **LIMITS))
        while (pid := job_child(child_pids() - mine - set(sandbox.idle_pids()), MEMORY)) is None:
            assert not task.done()
            await asyncio.sleep(0.01)
        monkeypatch.setattr(children, "drop", slow_drop)
        sandbox.configure(nice=3)  # retires the template, which is ended
        monkeypatch.setattr(children, "drop", real_drop)
        assert not Path(f"/proc/{warm}").exists()  # the template was killed and reaped ...
        assert alive(pid)  # ... while its child was at work on the job
        return (await task).text

    try:
        assert "still read" in asyncio.run(scenario())
    finally:
        sandbox.configure(nice=wire.DEFAULT_NICE)


def at_work(template: int) -> list[int]:
    """The template's forked children at work on a job (limits set): not its ready ones."""
    return [pid for pid in forked_children(template) if job_child([pid], MEMORY) is not None]


SLOW = 3  # jobs at work in forked children when the template is killed; the rest are tiny


def test_a_template_killed_mid_burst_costs_no_job(warm):
    """SLOTS=4 jobs back to back, 16 in all; the template is SIGKILLed once SLOW of them are
    at work in forked children: every job still gets its own text (forked before, cold
    meanwhile, forked again once the new template is ready). Only the jobs at work at the
    kill need to take long; the others are tiny, as the jobs queued behind them."""
    before = sandbox.child_starts()
    documents = [
        pdfs.slow_pdf(f"job-{i}", megabytes=1) if i < SLOW else pdfs.simple([f"job-{i}"])
        for i in range(16)
    ]
    killed = threading.Event()

    async def burst():
        queue = list(enumerate(documents))
        results: dict[int, str] = {}

        async def worker():
            while queue:
                i, data = queue.pop(0)
                results[i] = (await extract(data, **LIMITS)).text
                if i >= SLOW and not killed.is_set():  # mid-burst: forked children at work
                    await until(lambda: len(at_work(warm)) == SLOW, timeout=60)
                    assert queue, "no job left to start after the kill"
                    os.kill(warm, signal.SIGKILL)
                    killed.set()

        await asyncio.gather(*(worker() for _ in range(4)))
        return results

    results = asyncio.run(burst())
    assert killed.is_set()
    assert sorted(results) == list(range(16))
    for i, text in results.items():
        assert f"job-{i}" in text
    after = sandbox.child_starts()
    assert after.forked + after.cold - before.forked - before.cold >= 16
    wait_until(lambda: sandbox.idle_pids() not in ([], [warm]), timeout=30)
    assert after.template_starts >= before.template_starts
    assert sandbox.child_starts().template_starts == before.template_starts + 1


def test_a_change_of_nice_replaces_the_template_and_its_children_follow(warm):
    """``configure(nice=)`` ends the running template; the next starts at the new value, and
    a template that dies is started again at it."""
    from django_pdfpool.sandbox.wire import DEFAULT_NICE

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    sandbox.prewarm()
    wait_until(lambda: sandbox._template.pid() is not None, timeout=30)
    first = sandbox._template.pid()
    assert first is not None and os.getpriority(os.PRIO_PROCESS, first) == mine + DEFAULT_NICE
    try:
        sandbox.configure(nice=2)
        sandbox.prewarm()
        wait_until(lambda: sandbox._template.pid() not in (None, first), timeout=30)
        second = sandbox._template.pid()
        assert second is not None and os.getpriority(os.PRIO_PROCESS, second) == mine + 2
        os.kill(second, signal.SIGKILL)
        wait_until(lambda: sandbox._template.pid() not in (None, second), timeout=30)
        third = sandbox._template.pid()
        assert third is not None and os.getpriority(os.PRIO_PROCESS, third) == mine + 2
    finally:
        sandbox.configure(nice=DEFAULT_NICE)


def test_a_template_that_cannot_fork_ends_no_running_job(warm):
    """The template runs out of descriptors (or processes: a container's pids.max) while a
    job's child it forked is at work: the next job runs all the same (cold, or a ready
    child), and the running one is not killed with the template (it got its text)."""
    import psutil

    async def scenario() -> tuple[str, str]:
        mine = child_pids() - set(sandbox.idle_pids())
        running = asyncio.ensure_future(extract(pdfs.slow_pdf("running", 1), **LIMITS))
        while (pid := job_child(child_pids() - mine - set(sandbox.idle_pids()), MEMORY)) is None:
            assert not running.done()
            await asyncio.sleep(0.01)
        template = psutil.Process(warm)
        fds = template.num_fds()
        template.rlimit(psutil.RLIMIT_NOFILE, (fds, fds))  # no pipe for the next child
        late = await extract(pdfs.simple(["late"]), **LIMITS)
        assert alive(pid)  # the running job's child was at work all along
        return (await running).text, late.text

    running, late = asyncio.run(scenario())
    assert "running" in running and late == "late"


def test_a_stopped_template_costs_a_job_no_fault_of_its_pdf(warm):
    """The template is stopped (SIGSTOP) and a job's deadline passes while it waits for a fork:
    its trivial PDF never reached a child, so the job is lost (503), not `too_complex` (422);
    the stopped template is replaced."""
    from django_pdfpool.exceptions import RunnerLost
    from django_pdfpool.sandbox.children import FORK_TIMEOUT

    os.kill(warm, signal.SIGSTOP)
    try:
        with pytest.raises(RunnerLost):
            asyncio.run(
                extract(pdfs.simple(["trivial"]), timeout=FORK_TIMEOUT / 2, memory_limit=MEMORY)
            )
    finally:
        with contextlib.suppress(ProcessLookupError):  # replaced: killed by then
            os.kill(warm, signal.SIGCONT)
    wait_until(lambda: sandbox.idle_pids() not in ([], [warm]), timeout=30)
    assert (asyncio.run(extract(pdfs.simple(["next"]), **LIMITS))).text == "next"


def test_a_stopped_template_keeps_no_job_past_its_deadline(warm):
    """Jobs arriving at once while the template is stopped (SIGSTOP) each end by their
    TIMEOUT, lost (503), not after the template's FORK_TIMEOUT (one after another, as they
    queue for its socket); the template is replaced and the next job answers."""
    from django_pdfpool.exceptions import RunnerLost
    from django_pdfpool.sandbox.children import FORK_TIMEOUT

    timeout = FORK_TIMEOUT / 5

    async def timed() -> float:
        start = time.monotonic()
        with contextlib.suppress(RunnerLost):  # or its text, had a cold child time for it
            await extract(pdfs.simple(["trivial"]), timeout=timeout, memory_limit=MEMORY)
        return time.monotonic() - start

    async def burst() -> list[float]:
        return list(await asyncio.gather(*(timed() for _ in range(3))))

    os.kill(warm, signal.SIGSTOP)
    try:
        took = asyncio.run(burst())
    finally:
        with contextlib.suppress(ProcessLookupError):  # replaced: killed by then
            os.kill(warm, signal.SIGCONT)
    assert max(took) < timeout + 1.0, took  # a reaped child's end, on a busy host
    wait_until(lambda: sandbox.idle_pids() not in ([], [warm]), timeout=30)
    assert (asyncio.run(extract(pdfs.simple(["next"]), **LIMITS))).text == "next"


def test_a_template_late_for_a_short_deadline_only_is_kept_and_in_step(warm):
    """The template is stopped (SIGSTOP) for less than FORK_TIMEOUT: a job whose deadline
    came first is lost (503), but the template, continued in time, is not replaced; its late
    reply is read and dropped, so the next job gets a child of its own and the status page
    the template's ready children, each the reply to its own request."""
    from django_pdfpool.exceptions import RunnerLost
    from django_pdfpool.sandbox.children import FORK_TIMEOUT

    starts = sandbox.child_starts()
    os.kill(warm, signal.SIGSTOP)
    try:
        with pytest.raises(RunnerLost):
            asyncio.run(
                extract(pdfs.simple(["late"]), timeout=FORK_TIMEOUT / 10, memory_limit=MEMORY)
            )
    finally:
        os.kill(warm, signal.SIGCONT)
    assert (asyncio.run(extract(pdfs.simple(["next"]), **LIMITS))).text == "next"
    after = sandbox.child_starts()
    assert (after.template_pid, after.template_starts) == (warm, starts.template_starts)
    assert after.forked == starts.forked + 1 and after.cold == starts.cold
    assert sandbox.idle_pids()[0] == warm


def test_a_template_stopped_while_its_child_works_keeps_no_answer_past_the_deadline(
    warm, monkeypatch
):
    """The template is stopped (SIGSTOP) while a child it forked works: the child answers, and
    the answer is the caller's by the job's deadline, not once the template's exit status of
    the child has waited STATUS_TIMEOUT more (made longer than the deadline here, which
    leaves a loaded host's child the time its work takes)."""
    from django_pdfpool.sandbox import children

    timeout = 10.0
    monkeypatch.setattr(children, "STATUS_TIMEOUT", 3 * timeout)

    async def scenario() -> tuple[str, float]:
        mine = child_pids() - set(sandbox.idle_pids())
        start = time.monotonic()
        job = asyncio.ensure_future(
            extract(pdfs.slow_pdf("answered", 1), timeout=timeout, memory_limit=MEMORY)
        )
        await until(lambda: job_child(child_pids() - mine - {warm}, MEMORY) is not None)
        os.kill(warm, signal.SIGSTOP)
        try:
            text = (await job).pages[0]
        finally:
            os.kill(warm, signal.SIGCONT)
        return text, time.monotonic() - start

    text, took = asyncio.run(scenario())
    assert "answered" in text
    assert took < timeout + 1.0, took  # a reaped child's end, on a busy host


def test_a_late_reply_of_the_template_leaves_no_descriptor_nor_child(warm):
    """A fork request the template answered too late (it was stopped): the next request reads
    that reply, a child's descriptors; they are closed, so the child gets end of input and
    exits rather than waiting for a job line forever, and no descriptor is kept; then its own
    reply, so nothing is left to be taken for the reply to a later request."""
    running = sandbox._template._running
    assert running is not None and running.child.pid == warm
    # none ready from an earlier test's jobs (one handed over would be replaced, and listed)
    wait_until(lambda: running.ready_pids() == [], timeout=30)
    fds = len(os.listdir("/proc/self/fd"))
    os.kill(warm, signal.SIGSTOP)
    try:  # timed out: the template answers it once continued
        assert running.fork(time.monotonic() + 0.2) is None
    finally:
        os.kill(warm, signal.SIGCONT)
    assert running.ready_pids() == []  # the fork's reply read here: not pids
    assert len(os.listdir("/proc/self/fd")) == fds
    poller = select.poll()
    poller.register(running.control, select.POLLIN)
    assert poller.poll(0) == []  # its own reply ("-") read too: nothing left, in step
    wait_until(lambda: forked_children(warm) == [], timeout=10)


def test_ending_a_template_waits_for_the_reader_of_its_socket_before_closing_it(warm):
    """A thread waits for the template's reply when the template is ended: the socket is shut
    down (the reader wakes at once) and closed only once no thread reads it, so its number is
    never reused under a reader. The template's end is held by this test too (pidfd_getfd):
    its death alone does not wake the reader."""
    running = sandbox._template._running
    assert running is not None and running.child.pid == warm
    fds = os.listdir(f"/proc/{warm}/fd")
    sockets = [int(fd) for fd in fds if "socket:" in os.readlink(f"/proc/{warm}/fd/{fd}")]
    assert len(sockets) == 1
    pidfd = os.pidfd_open(warm)
    libc = ctypes.CDLL(None, use_errno=True)
    peer = libc.syscall(PIDFD_GETFD, pidfd, sockets[0], 0)
    os.close(pidfd)
    assert peer >= 0, os.strerror(ctypes.get_errno())
    os.kill(warm, signal.SIGSTOP)  # it never replies: the reader waits in the socket
    replies: list[list[int]] = []
    reader = threading.Thread(target=lambda: replies.append(running.ready_pids()))
    try:
        reader.start()
        wait_until(running.lock.locked, timeout=5)
        started = time.monotonic()
        sandbox._template._retire(running, end=True)
        assert not reader.is_alive()  # closed only once its reader left
        assert time.monotonic() - started < FORK_TIMEOUT / 2
        assert replies == [[]]
    finally:
        reader.join()
        os.close(peer)


def test_a_child_killed_while_its_template_is_stopped_is_judged_by_its_signal_at_once(warm):
    """The template is stopped (SIGSTOP) when a child it forked dies of SIGXCPU (its CPU
    limit): the job's error says so (422 ``too_complex``) at once, from the child's exit status
    as the kernel keeps it, not ``crashed`` once the template's report has waited
    STATUS_TIMEOUT."""
    from django_pdfpool.exceptions import ExtractionError
    from django_pdfpool.sandbox.children import STATUS_TIMEOUT

    async def scenario() -> tuple[ExtractionError, float]:
        mine = child_pids() - set(sandbox.idle_pids())
        job = asyncio.ensure_future(extract(pdfs.slow_pdf("busy", 30), **LIMITS))
        await until(lambda: job_child(child_pids() - mine - {warm}, MEMORY) is not None)
        child = job_child(child_pids() - mine - {warm}, MEMORY)
        os.kill(warm, signal.SIGSTOP)
        try:
            os.kill(child, signal.SIGXCPU)
            start = time.monotonic()
            with pytest.raises(ExtractionError) as raised:
                await job
            return raised.value, time.monotonic() - start
        finally:
            os.kill(warm, signal.SIGCONT)

    error, took = asyncio.run(scenario())
    assert (error.code, error.detail) == ("too_complex", "SIGXCPU")
    assert took < STATUS_TIMEOUT / 2, took
