"""The template: started lazily, forks every warm job's child (a ready one, forked and warmed up
ahead, when it has one), restarted when it dies (jobs meanwhile cold), the only idle process
once no job came for a few seconds, turned off by a setting, ended by shutdown(), and never
outliving its parent, nor letting its children do so."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from django_pdfpool import extract
from django_pdfpool.sandbox import children
from django_pdfpool.sandbox import extract as sandbox
from tests.conftest import wait_until
from tests.support import pdfs
from tests.support.procs import CHILD_MARK, READY_NAME, child_pids, leftovers, name

LIMITS = {"timeout": 10.0, "memory_limit": 256 << 20}
ROOT = Path(__file__).resolve().parents[2]


def gone(pid: int) -> bool:
    """Exited and reaped (or, for another process's child, at least exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :].startswith(b"Z") and pid not in child_pids()


def the_template() -> int:
    wait_until(lambda: sandbox.child_starts().template_pid is not None, timeout=30)
    pid = sandbox.child_starts().template_pid
    assert pid is not None and sandbox.idle_pids()[0] == pid
    return pid


READY_IDLE = 1.0  # seconds: the ready children's idle time in these tests (default 5)


def shut_down() -> None:
    """shutdown(), and its supervisor gone: one that had not seen it yet when templates were
    turned on again (the fixture's end) would go on and start a template with the settings it
    read then (another test's ready_idle), taken for the next test's own."""
    sandbox.shutdown()
    wait_until(lambda: sandbox._template._thread is None, timeout=60)


@pytest.fixture
def template():
    shut_down()
    sandbox._template.ready_idle = READY_IDLE  # read when a template starts
    before = child_pids()
    yield sandbox.configure
    shut_down()
    assert leftovers(before) == set()
    sandbox._template.ready_idle = children.READY_IDLE
    sandbox.configure(warm=True)


def ready_children(template: int) -> list[int]:
    """The template's children that wait for a job, by their name, oldest first."""
    children = Path(f"/proc/{template}/task/{template}/children").read_text().split()
    return [int(pid) for pid in children if name(int(pid)) == READY_NAME]


def run(data=None, **options):
    data = pdfs.simple(["warm"]) if data is None else data
    return asyncio.run(extract(data, **{**LIMITS, **options}))


def test_the_template_starts_lazily_and_forks_each_job_a_child(template):
    template(warm=True)
    assert sandbox.idle_pids() == []  # nothing before the first job
    assert run().child_start == "cold"  # the first job does not wait for the template
    pid = the_template()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert CHILD_MARK in cmdline and b"--template" in cmdline
    before = sandbox.child_starts()
    for _ in range(3):
        assert run().child_start == "forked"
    after = sandbox.child_starts()
    assert (after.forked - before.forked, after.cold - before.cold) == (3, 0)
    assert after.template_pid == pid == the_template()  # the same template throughout


def test_prewarm_starts_the_template_before_any_job(template):
    template(warm=True)
    sandbox.prewarm()
    pid = the_template()
    assert run().child_start == "forked" and sandbox.idle_pids()[0] == pid


def test_a_dead_template_is_restarted_and_jobs_meanwhile_run_cold(template):
    template(warm=True)
    sandbox.prewarm()
    dead = the_template()
    starts = sandbox.child_starts().template_starts
    os.kill(dead, signal.SIGKILL)
    wait_until(lambda: dead not in sandbox.idle_pids())
    assert run().text == "warm"  # forked if the new one is ready already, cold otherwise
    assert the_template() != dead
    assert sandbox.child_starts().template_starts == starts + 1
    assert run().child_start == "forked"


def test_ready_children_follow_demand(template):
    """A job leaves one ready child (forked, warmed up, waiting); a burst leaves as many as
    ran at once (at most MAX_READY); a job takes the oldest and a fresh one is made.
    The burst's jobs take a second's work each, so that they run at once on a busy host too
    (tiny ones ended there before the next began: 3 at once), and the children run niced:
    forking and warming four takes tens of seconds there, so they idle 60 s here (the other
    tests' 1 s would drop them while they come); the fixture's shutdown ends them."""
    idle = sandbox._template.ready_idle = 60.0  # read when it starts; the fixture resets it
    template(warm=True)
    sandbox.prewarm()
    pid = the_template()
    assert sandbox.idle_pids() == [pid] and ready_children(pid) == []
    assert run().child_start == "forked"  # forked at once: nothing was ready
    wait_until(lambda: len(ready_children(pid)) == 1)
    assert sandbox.idle_pids() == [pid, *ready_children(pid)]
    assert sandbox.child_starts().ready == 1

    async def burst():
        long = {**LIMITS, "timeout": 120.0}  # a second's work each: all 8 run at once
        jobs = [extract(pdfs.slow_pdf(f"b{i}"), **long) for i in range(8)]
        return await asyncio.gather(*jobs)

    results = asyncio.run(burst())
    assert [r.text.split(maxsplit=1)[0] for r in results] == [f"b{i}" for i in range(8)]
    assert {r.child_start for r in results} == {"forked"}
    most = sandbox._template.max_ready
    wait_until(lambda: len(ready_children(pid)) == most, timeout=idle)  # as many as allowed
    ready = ready_children(pid)
    assert sorted(sandbox.idle_pids()) == sorted([pid, *ready])
    assert run().text == "warm"
    wait_until(
        lambda: len(ready_children(pid)) == most and ready[0] not in ready_children(pid),
        timeout=idle,
    )
    assert ready[1:] == ready_children(pid)[:-1]  # the oldest took the job; a new one came


def test_ready_children_are_gone_at_rest_whatever_the_burst(template):
    """`ready_idle` seconds after the last job, however many ready children a burst left,
    only the template is left (5 s here). They are seen while the burst runs: its clock
    starts at the last job's start, and a burst on a busy host may outlast it."""
    idle = sandbox._template.ready_idle = children.READY_IDLE  # read when it starts
    template(warm=True)
    sandbox.prewarm()
    pid = the_template()

    async def burst():
        long = {**LIMITS, "timeout": 120.0}
        return await asyncio.gather(*(extract(pdfs.slow_pdf(f"r{i}"), **long) for i in range(4)))

    with ThreadPoolExecutor(1) as runner:
        results = runner.submit(asyncio.run, burst())
        wait_until(lambda: ready_children(pid) != [], timeout=30)
        assert {r.child_start for r in results.result(timeout=120)} == {"forked"}
    wait_until(lambda: sandbox.idle_pids() == [pid], timeout=idle + 30)
    wait_until(lambda: child_pids() == {pid} or all(map(gone, child_pids() - {pid})))
    assert sandbox.child_starts().ready == 0 and ready_children(pid) == []


def test_warm_off(template):
    before = child_pids()
    template(warm=False)
    sandbox.prewarm()
    assert run().child_start == "cold"
    wait_until(lambda: not child_pids() - before)  # no template was started
    assert sandbox.idle_pids() == []
    template(warm=True)
    assert run(warm=False).child_start == "cold"  # and per call, whatever the setting


def test_shutdown_ends_the_template(template):
    template(warm=True)
    sandbox.prewarm()
    pid = the_template()
    sandbox.shutdown()
    assert sandbox.idle_pids() == [] and gone(pid)
    assert not sandbox.child_starts().enabled


def test_pdfium_jobs_make_the_template_preload_it(template):
    pytest.importorskip("pypdfium2")
    template(warm=True)
    run(engine="pypdfium2")
    wait_until(
        lambda: (
            sandbox.idle_pids()
            and b"pypdfium2" in Path(f"/proc/{sandbox.idle_pids()[0]}/cmdline").read_bytes()
        ),
        timeout=30,
    )
    assert run(engine="pypdfium2").child_start == "forked"
    assert run(engine="pypdf").child_start == "forked"  # it serves either engine


SCRIPT = """
import asyncio, json, os, signal, sys, time
from pathlib import Path
import django_pdfpool.sandbox.extract as extraction
from tests.support import pdfs
extraction.prewarm()
while not extraction.idle_pids():
    time.sleep(0.01)
how = sys.argv[1]
async def main():
    # a job the server will not see the end of: a forked child, busy for seconds
    task = asyncio.ensure_future(extraction.extract(pdfs.cpu_bomb(), timeout=30,
                                                    memory_limit=1 << 30))
    while extraction.child_starts().forked == 0:
        await asyncio.sleep(0.01)
    template = extraction.child_starts().template_pid
    while extraction.idle_pids() == [template]:  # the ready child made after it
        await asyncio.sleep(0.01)
    # read while this process holds everything alive: the job's child and the ready one
    children = Path(f"/proc/{template}/task/{template}/children").read_text().split()
    print(json.dumps({"template": template, "forked": [int(p) for p in children]}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the test has seen them: now end
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "os_exit":
        os._exit(0)
    task.cancel()
asyncio.run(main())
"""


def describe(pids: list[int]) -> str:
    return "; ".join(
        f"{pid}: {Path(f'/proc/{pid}/stat').read_text()}" for pid in pids if not gone(pid)
    )


@pytest.mark.parametrize("how", ["normal exit", "os_exit", "sigkill"])
def test_nothing_outlives_the_parent(how):
    """atexit ends the template and every child; without atexit (SIGKILL, os._exit, or a
    server that re-raises SIGTERM) the template reads the end of its input (its SIGTERM from
    the kernel is blocked), and kills its children (the job's and the ready one) as it exits."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), how.replace(" ", "_")],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    line = proc.stdout.readline()  # the script waits on stdin after it: all alive here
    assert line, proc.communicate(timeout=60)
    seen = json.loads(line)
    template, forked = seen["template"], seen["forked"]
    # the job's child and the ready one made after it (at least the job's)
    assert forked and not any(map(gone, [template, *forked])), seen
    proc.communicate(b"end\n", timeout=60)
    pids = [template, *forked]
    try:  # "did not hang": generous on a loaded machine
        wait_until(lambda: all(map(gone, pids)), timeout=30)
    except AssertionError:
        raise AssertionError(f"still there: {describe(pids)}") from None


FORK_SCRIPT = """
import asyncio, os, time
import django_pdfpool.sandbox.extract as extraction
from tests.support import pdfs
extraction.prewarm()
while not extraction.idle_pids():
    time.sleep(0.01)
template = extraction.idle_pids()[0]
pid = os.fork()  # as a pre-forking server does with its workers
if pid == 0:
    ok = extraction.idle_pids() == []  # the parent's template is not the worker's to use
    text = asyncio.run(extraction.extract(pdfs.simple(["forked"]), timeout=10,
                                          memory_limit=256 << 20)).text
    print("worker", ok, text, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", extraction.idle_pids() == [template] and os.path.exists(f"/proc/{template}"))
"""


def test_a_forked_worker_leaves_the_parents_template_alone():
    proc = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT], cwd=ROOT, capture_output=True, timeout=60, text=True
    )
    assert proc.stdout.split("\n")[:2] == ["worker True forked", "parent True"], proc.stderr


@pytest.mark.parametrize("engine", ["pypdf", "pypdfium2"])
def test_the_rehearsal_runs_a_whole_job_on_a_valid_document(engine):
    """The warm-up document is a PDF both engines read (a broken one left pypdf's text path
    cold in every warmed child: about 0.1x of a small job), and the rehearsal that templates,
    ready children and spares run goes through a whole job's path without an error."""
    if engine == "pypdfium2":
        pytest.importorskip("pypdfium2")
    from django_pdfpool.sandbox.child_main import extract_job, rehearse
    from django_pdfpool.sandbox.engines import WARM_UP_PDF
    from django_pdfpool.sandbox.wire import Extracted, ExtractionJob

    answer = extract_job(ExtractionJob("", engine, 10.0, 256 << 20, None, False), WARM_UP_PDF)
    assert isinstance(answer, Extracted), answer
    assert answer.page_count == 1 and "warm" in answer.pages[0]
    assert answer.metadata["Title"] == "warm"
    rehearse((engine,))


ENCRYPTIONS = {"RC4-128": (2, 3), "AES-128": (4, 4), "AES-256": (5, 6)}  # /V, /R


def test_the_warm_up_document_is_read_encrypted_each_way():
    """RC4 (as LibreOffice writes it), AES-128 and AES-256, each with the empty user password:
    a whole job reads each one's text, so the ciphers and hashes are set up."""
    pytest.importorskip("cryptography")  # AES: pypdf needs a crypto library to write it
    from pypdf import PdfReader

    from django_pdfpool.sandbox.child_main import extract_job
    from django_pdfpool.sandbox.engines import WARM_UP_ENCRYPTIONS, encrypted_warm_ups
    from django_pdfpool.sandbox.wire import Extracted, ExtractionJob

    documents = encrypted_warm_ups()
    assert tuple(ENCRYPTIONS) == WARM_UP_ENCRYPTIONS and len(documents) == len(ENCRYPTIONS)
    for document, (version, revision) in zip(documents, ENCRYPTIONS.values(), strict=True):
        encryption = PdfReader(io.BytesIO(document)).trailer["/Encrypt"]
        assert (encryption["/V"], encryption["/R"]) == (version, revision)
        job = ExtractionJob("", "pypdf", 10.0, 256 << 20, None, False)
        answer = extract_job(job, document)
        assert isinstance(answer, Extracted) and "warm" in answer.pages[0], answer


NO_CRYPTO_SCRIPT = """
import sys
sys.modules["cryptography"] = sys.modules["Crypto"] = None  # neither crypto library
from pypdf import PdfReader
import io
from django_pdfpool.sandbox.child_main import rehearse
from django_pdfpool.sandbox.engines import encrypted_warm_ups
rehearse(("pypdf",), encrypted=True)  # the template's start-up: no DependencyError
print([dict(PdfReader(io.BytesIO(d)).trailer["/Encrypt"])["/V"] for d in encrypted_warm_ups()])
"""


def test_without_a_crypto_library_the_template_warms_up_on_rc4_alone():
    """pypdf writes AES only with ``cryptography`` or ``pycryptodome``, neither of which the
    package requires: the AES documents are left out and the template still starts."""
    proc = subprocess.run(
        [sys.executable, "-c", NO_CRYPTO_SCRIPT],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[2]"], proc.stderr


REHEARSALS_SCRIPT = """
import json, sys
from django_pdfpool.sandbox import child_main

seen = []  # rehearse's ``encrypted``, then one entry per document a rehearsal reads


def extract_job(job, document):
    seen.append(len(document))
    return child_main.ExtractionError("malformed")


original_rehearse = child_main.rehearse


def rehearse(engines, encrypted=False):
    seen.append(encrypted)
    original_rehearse(engines, encrypted)


child_main.extract_job, child_main.rehearse = extract_job, rehearse
child_main.serve_template = child_main.serve_job = lambda *a, **k: sys.exit(0)
child_main.confine.confine_process = lambda level: None
child_main.os.setpriority = lambda *a: None
child_main.write_all = lambda *a: None
try:
    child_main.main(sys.argv[1:])
finally:
    print(json.dumps(seen))
"""


@pytest.mark.parametrize(
    "options, rehearsed",
    [(["--template"], (True, 4)), (["--warm-up"], (False, 1)), ([], None)],
    ids=["template", "cold-warmed", "cold"],
)
def test_only_the_template_rehearses_the_encrypted_documents(options, rehearsed):
    """Once, before it forks: its children inherit the ciphers set up. A cold child warmed
    up reads the plain document only (its start-up is on a job's path); one not warmed up
    rehearses nothing."""
    pytest.importorskip("cryptography")
    proc = subprocess.run(
        [sys.executable, "-c", REHEARSALS_SCRIPT, *options],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        text=True,
    )
    assert proc.stdout.strip(), proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ((seen[0], len(seen) - 1) if seen else None) == rehearsed, proc.stderr
