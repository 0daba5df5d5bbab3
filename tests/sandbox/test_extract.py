"""extract() on valid PDFs the tests write themselves: results, sources, options, arguments,
callers on any loop in any thread, cancellation; and the wire format a real child speaks."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pypdf import PdfReader

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool import Extraction, extract
from django_pdfpool.exceptions import EXTRACTION_MESSAGES as MESSAGES
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox.children import CHILD_MODULE, job_started
from django_pdfpool.sandbox.engines import preload
from django_pdfpool.sandbox.wire import (
    DEFAULT_NICE,
    ENGINES,
    READY,
    STARTED,
    Extracted,
    ExtractionJob,
    answer_end,
    child_options,
    decode_answer,
    decode_job,
    encode_answer,
    encode_job,
    read_child_options,
)
from tests.support import pdfs
from tests.support.procs import child_pids, job_child, leftovers

LIMITS = {"timeout": 10.0, "memory_limit": 256 << 20}


@pytest.fixture
def copies(tmp_path):
    """Byte sources are copied into this directory; the template on, as by default."""
    directory = tmp_path / "copies"
    directory.mkdir()
    extraction.configure(warm=True, tmp_dir=directory)
    yield directory
    extraction.configure(tmp_dir=None)


def run(source, **options):
    return asyncio.run(extract(source, **{**LIMITS, **options}))


def no_idle_workers(timeout: float = 30.0) -> None:
    """Until the threads kept from earlier jobs (``pdfpool-idle``) have left."""
    deadline = time.monotonic() + timeout
    while any(t.name == "pdfpool-idle" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "idle worker threads did not leave"
        time.sleep(0.05)


def test_extract_does_not_wait_on_its_loop_for_the_worker_thread_to_start(copies):
    """``extract()`` hands its worker thread to the starter: the caller's loop does not wait
    in ``Thread.start()`` (which waits until the new thread runs) for any job."""
    no_idle_workers()  # else a kept thread takes a job and none is started
    loop_thread = threading.get_ident()
    started_on: list[int] = []
    started_on_names: list[str] = []
    original = threading.Thread.start

    def recording(thread: threading.Thread) -> None:
        if thread.name == "pdfpool-extract":
            started_on.append(threading.get_ident())
            started_on_names.append(threading.current_thread().name)
        original(thread)

    async def jobs() -> list[Extraction]:
        return await asyncio.gather(
            *(extract(pdfs.simple([f"job {i}"]), **LIMITS) for i in range(3))
        )

    threading.Thread.start = recording  # type: ignore[method-assign]
    try:
        results = asyncio.run(jobs())
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
    assert [r.pages for r in results] == [(f"job {i}",) for i in range(3)]
    assert len(started_on) == 3 and loop_thread not in started_on
    assert all(name == "pdfpool-starter" for name in started_on_names)


def test_a_worker_thread_that_cannot_start_fails_its_job_instead_of_hanging(copies):
    """No thread to be had (``RuntimeError: can't start new thread``): the job raises."""
    no_idle_workers()
    original = threading.Thread.start

    def refusing(thread: threading.Thread) -> None:
        if thread.name == "pdfpool-extract":
            raise RuntimeError("can't start new thread")
        original(thread)

    threading.Thread.start = refusing  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            asyncio.run(asyncio.wait_for(extract(pdfs.simple(["x"]), **LIMITS), 30))
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]


def test_result_fields(copies):
    data = pdfs.simple(["Hello world", "Second page"], title="A title")
    result = run(data)
    assert isinstance(result, Extraction)
    assert result.pages == ("Hello world", "Second page")
    assert result.text == "Hello world\n\nSecond page"
    assert result.page_count == 2 and result.truncated is False
    assert result.metadata["Title"] == "A title"
    assert result.metadata["Producer"] == "tests/support/pdfs.py"
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert 0 < result.elapsed < LIMITS["timeout"]
    assert 0 < result.peak_rss <= LIMITS["memory_limit"]
    assert list(copies.iterdir()) == []


def test_text_equals_in_process_pypdf(copies):
    data = pdfs.reportlab_pdf(["First line\nsecond line", "Ünïcödé page", "", "last"])
    expected = [page.extract_text() for page in PdfReader(io.BytesIO(data)).pages]
    for warm in (True, False):
        assert list(run(data, warm=warm).pages) == expected


def test_path_source_is_read_and_kept(tmp_path, copies):
    path = tmp_path / "upload.pdf"
    path.write_bytes(pdfs.simple(["from a path"]))
    result = run(path)
    assert result.text == "from a path"
    assert result.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert path.exists()  # the caller's file stays
    assert run(str(path)).text == "from a path"


def test_max_pages_truncates_or_refuses(copies):
    data = pdfs.simple([f"page {n}" for n in range(1, 6)])
    result = run(data, max_pages=2)
    assert result.pages == ("page 1", "page 2") and result.truncated
    assert result.page_count == 5
    assert run(data, max_pages=5).truncated is False
    with pytest.raises(ExtractionError) as caught:
        run(data, max_pages=2, on_too_many_pages="refuse")
    assert caught.value.code == "too_many_pages"


def test_too_many_pages_are_refused_on_the_declared_count_before_the_page_tree_is_walked(
    monkeypatch,
):
    """With ``refuse``, pypdf's engine reads /Root /Pages /Count and refuses at once: the
    page tree is not walked (20,000 pages take seconds to walk on a busy machine). A /Count
    that lies low lets no more pages through: the walk counts them, as before."""
    from django_pdfpool.sandbox import engines

    walks = []
    flatten = PdfReader._flatten

    def counting_flatten(self, *args, **kwargs):
        walks.append(1)
        return flatten(self, *args, **kwargs)

    monkeypatch.setattr(PdfReader, "_flatten", counting_flatten)
    many = pdfs.many_pages(2_000)
    with pytest.raises(ExtractionError) as caught:
        engines.extract_pages("pypdf", many, max_pages=50, refuse=True)
    assert (caught.value.code, caught.value.detail) == ("too_many_pages", "2000 pages")
    assert walks == []
    lying = pdfs.many_pages(2_000, declared=10)
    with pytest.raises(ExtractionError) as caught:
        engines.extract_pages("pypdf", lying, max_pages=50, refuse=True)
    assert (caught.value.code, caught.value.detail) == ("too_many_pages", "2000 pages")
    assert walks == [1]
    truncated = engines.extract_pages("pypdf", many, max_pages=50, refuse=False)
    assert (truncated["page_count"], len(truncated["pages"])) == (2_000, 50)
    within = engines.extract_pages("pypdf", pdfs.many_pages(3), max_pages=50, refuse=True)
    assert (within["page_count"], within["truncated"]) == (3, False)


def test_file_larger_than_memory_limit_is_refused_at_once(copies):
    data = pdfs.simple(["x"]) + b"%" * (2 << 20)
    started = time.monotonic()
    with pytest.raises(ExtractionError) as caught:
        run(data, memory_limit=1 << 20)
    assert caught.value.code == "too_large"
    assert time.monotonic() - started < 1.0
    assert list(copies.iterdir()) == []


def test_a_buffer_source_is_measured_and_copied_in_bytes_whatever_its_format(copies):
    """A memoryview of another format (4-byte items: a length of a quarter of its bytes) is
    refused over the memory limit by its bytes; one that is not contiguous is a TypeError
    that says so, before any copy is made."""
    data = pdfs.simple(["x"]) + b"%" * (2 << 20)
    data += b" " * (-len(data) % 4)
    words = memoryview(data).cast("I")
    assert len(words) < 1 << 20 < words.nbytes
    with pytest.raises(ExtractionError) as caught:
        run(words, memory_limit=1 << 20)
    assert (caught.value.code, caught.value.detail) == (
        "too_large",
        "file larger than the memory limit",
    )
    assert run(memoryview(data).cast("I")).pages == ("x",)
    with pytest.raises(TypeError, match="contiguous"):
        run(memoryview(data)[::2])
    assert list(copies.iterdir()) == []


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": 0},
        {"timeout": -1},
        {"memory_limit": 0},
        {"max_pages": 0},
        {"engine": "poppler"},
        {"on_too_many_pages": "skip"},
    ],
)
def test_bad_arguments(options, copies):
    with pytest.raises(ValueError):
        run(pdfs.simple(["x"]), **options)


def test_bad_paths(tmp_path, copies):
    with pytest.raises(FileNotFoundError):
        run(tmp_path / "missing.pdf")
    with pytest.raises(ValueError):
        run(tmp_path)


def test_callers_in_several_threads_at_once(copies):
    """Each thread runs its own event loop; all get their own right answer."""
    before = child_pids()
    results: dict[int, str] = {}

    def caller(n):
        results[n] = run(pdfs.simple([f"thread {n}"])).text

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {n: f"thread {n}" for n in range(6)}
    assert leftovers(before) == set()
    assert list(copies.iterdir()) == []


def test_cancelled_by_wait_for(copies):
    """asyncio.wait_for cancels the job: the child is killed and reaped, the copy removed."""
    before = child_pids()

    async def scenario():
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(extract(pdfs.cpu_bomb(), **LIMITS), 0.5)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < LIMITS["timeout"] / 2  # not the job's own deadline
    assert leftovers(before, timeout=0) == set()
    assert list(copies.iterdir()) == []


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_cancellation_repeated_while_the_child_is_reaped_still_waits_for_it(copies, warm):
    """Cancelled again and again until it ends (as anyio's cancel scopes do), a job still
    returns only once its child is reaped and its copy removed."""
    before = child_pids()

    async def scenario():
        task = asyncio.create_task(extract(pdfs.cpu_long(), **LIMITS, warm=warm))
        deadline = time.monotonic() + LIMITS["timeout"]
        while (pid := job_child(child_pids(), LIMITS["memory_limit"])) is None:
            assert time.monotonic() < deadline and not task.done(), "no child took the job"
            await asyncio.sleep(0.01)
        while not task.done():
            task.cancel()
            await asyncio.sleep(0)
        assert task.cancelled()
        return os.path.exists(f"/proc/{pid}"), leftovers(before, timeout=0), list(copies.iterdir())

    child, left, files = asyncio.run(scenario())
    assert not child
    assert left == set()
    assert files == []


def test_error_messages_are_safe(tmp_path, copies):
    path = tmp_path / "secret-name.pdf"
    path.write_bytes(b"<html>not a pdf</html>")
    with pytest.raises(ExtractionError) as caught:
        run(path)
    error = caught.value
    assert error.code == "not_a_pdf"
    assert "secret-name" not in str(error) + error.message + error.detail
    assert str(tmp_path) not in str(error) + error.message + error.detail


def test_errors_copy_and_pickle():
    """Single-flight hands one error to several callers: copies must keep every field."""
    error = ExtractionError("too_large", detail="SIGABRT", elapsed=0.5, peak_rss=1 << 20)
    for clone in (copy.copy(error), copy.deepcopy(error), pickle.loads(pickle.dumps(error))):
        assert (clone.code, clone.message, clone.detail, clone.elapsed, clone.peak_rss) == (
            "too_large",
            MESSAGES["too_large"],
            "SIGABRT",
            0.5,
            1 << 20,
        )
        assert str(clone) == f"too_large: {MESSAGES['too_large']}"


def test_the_pdf_side_imports_neither_django_nor_the_pool():
    code = (
        "import sys, django_pdfpool.sandbox.extract, django_pdfpool.sandbox.child_main\n"
        "bad = [m for m in sys.modules\n"
        "       if m.split('.')[0] == 'django' or m.startswith('django_pdfpool.admission')]\n"
        "print(bad)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


CHILD_IMPORTS_NONE_OF = (
    "asyncio",
    "concurrent",
    "django",
    "asgiref",
    "redis",
    "django_pdfpool.admission",
    "django_pdfpool.sandbox.extract",
    "django_pdfpool.sandbox.children",
)


def test_the_child_imports_none_of_the_parent_side():
    """The child starts up without the parent side (asyncio, extract, children),
    Django or the pool: it imports only its own side, the wire and the exceptions."""
    code = (
        "import sys, django_pdfpool.sandbox.child_main\n"
        "from django_pdfpool.sandbox.engines import preload\n"
        "preload('pypdf')\n"
        f"banned = {CHILD_IMPORTS_NONE_OF!r}\n"
        "print([m for m in sys.modules if any(m == b or m.startswith(b + '.') for b in banned)])"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "[]", proc.stderr


def run_child(job_line: bytes, *options: str) -> subprocess.CompletedProcess[bytes]:
    """A real child, started with the parent's command line, fed `job_line` on stdin."""
    argv = [sys.executable, "-P", "-m", CHILD_MODULE, *options]
    return subprocess.run(argv, input=job_line, capture_output=True, timeout=60)


def a_job(path, max_pages: int | None = None, refuse: bool = False) -> ExtractionJob:
    return ExtractionJob(
        path=str(path),
        engine="pypdf",
        timeout=LIMITS["timeout"],
        memory_limit=LIMITS["memory_limit"],
        max_pages=max_pages,
        refuse=refuse,
    )


def test_a_real_child_says_ready_then_started_then_answers(tmp_path):
    data = pdfs.simple(["over the wire"])
    (tmp_path / "doc.pdf").write_bytes(data)
    child = run_child(encode_job(a_job(tmp_path / "doc.pdf")))
    assert child.returncode == 0
    output = child.stdout
    assert output.startswith(READY + STARTED) and output.count(b"\n") == 3
    assert job_started(output) and answer_end(output) == len(output)
    assert job_started(output.removeprefix(READY))  # as a forked child's output reads
    assert answer_end(READY + STARTED) is None and answer_end(output[:-1]) == len(output)
    answer = decode_answer(output)
    assert isinstance(answer, Extracted)
    assert answer.pages == ["over the wire"] and answer.page_count == 1
    assert answer.sha256 == hashlib.sha256(data).hexdigest()
    assert answer.elapsed > 0 and answer.peak_rss > 0


def test_a_real_child_answers_a_failure_with_its_code(tmp_path):
    (tmp_path / "page.pdf").write_bytes(b"<html>not a pdf</html>")
    (tmp_path / "long.pdf").write_bytes(pdfs.simple(["1", "2", "3"]))
    for path, fields, code in [
        ("page.pdf", {}, "not_a_pdf"),
        ("long.pdf", {"max_pages": 2, "refuse": True}, "too_many_pages"),
        ("missing.pdf", {}, "crashed"),  # the job's own file is gone: not the PDF's fault
    ]:
        output = run_child(encode_job(a_job(tmp_path / path, **fields)), "--warm-up").stdout
        answer = decode_answer(output)
        assert isinstance(answer, ExtractionError) and answer.code == code, output
        assert answer.elapsed is not None and answer.peak_rss is not None


def test_a_real_child_exits_quietly_at_eof():
    """A child whose parent is gone (or discarded it) reads EOF instead of a job."""
    child = run_child(b"")
    assert (child.returncode, child.stdout) == (0, READY)


def test_the_child_command_line():
    nice = ["--nice", str(DEFAULT_NICE)]  # always said: a child of another install agrees
    assert child_options((), False) == nice
    assert child_options(("pypdfium2",), True) == ["--preload", "pypdfium2", *nice, "--warm-up"]
    assert child_options((), False, template=True, parent=7) == [
        *nice,
        "--template",
        "--parent",
        "7",
    ]
    assert read_child_options(child_options((), False, nice=11)).nice == 11
    assert read_child_options([]).nice == DEFAULT_NICE
    for preload_engines, warm_up in [((), False), ((), True), (("pypdfium2",), False)]:
        for template, parent in [(False, None), (True, 12)]:
            options = child_options(preload_engines, warm_up, template=template, parent=parent)
            assert read_child_options(options)[:4] == (preload_engines, warm_up, template, parent)
    options = child_options((), False, template=True, ready=(3, 2.5))
    assert options == [*nice, "--template", "--ready", "3,2.5"]
    assert read_child_options(options).ready == (3, 2.5)


def test_every_engine_the_parent_accepts_the_child_can_load():
    for engine in ENGINES:
        if engine == "pypdfium2":
            pytest.importorskip("pypdfium2")
        preload(engine)


def test_the_job_line_round_trips_any_path():
    job = a_job("/tmp/caf\udce9 \u00e9t\u00e9\n.pdf", max_pages=3, refuse=True)  # not UTF-8
    line = encode_job(job)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_job(line) == job


def test_the_answer_line_replaces_lone_surrogates():
    answer = Extracted(
        sha256="0" * 64,
        page_count=1,
        pages=["a\ud800b\nc"],
        metadata={"Title": "\udfff"},
        truncated=False,
        elapsed=0.5,
        peak_rss=1 << 20,
    )
    line = encode_answer(answer)
    line.decode("utf-8")  # strict: no surrogate reaches the parent
    decoded = decode_answer(READY + STARTED + line)
    assert decoded == Extracted(
        sha256="0" * 64,
        page_count=1,
        pages=["a\ufffdb\nc"],
        metadata={"Title": "\ufffd"},
        truncated=False,
        elapsed=0.5,
        peak_rss=1 << 20,
    )


def test_a_failure_answer_keeps_its_code_and_a_short_detail():
    line = b'{"ok":false,"code":"encrypted","detail":"' + b"x" * 500 + b'","elapsed":"soon"}\n'
    answer = decode_answer(STARTED + line)
    assert isinstance(answer, ExtractionError)
    assert (answer.code, answer.message) == ("encrypted", MESSAGES["encrypted"])
    assert answer.detail == "x" * 200 and answer.elapsed is None and answer.peak_rss is None


VALID = encode_answer(Extracted("0", 1, ["a"], {"k": "v"}, False, elapsed=0.1, peak_rss=1))
HEADER = json.loads(VALID.split(b"\n")[0])


def answer(**fields) -> bytes:
    """VALID with its header's `fields` changed."""
    return json.dumps({**HEADER, **fields}).encode() + b"\n" + VALID.split(b"\n", 1)[1]


@pytest.mark.parametrize(
    "output",
    [
        b"",
        READY,
        READY + STARTED,
        VALID[:-1],  # cut short
        VALID + b"more",
        b"not json\n",
        b"[1, 2]\n",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        answer(pages="a"),
        answer(pages=2),  # more pages than pieces
        answer(pages=-1, metadata=2),
        answer(metadata=65),
        answer(metadata=True),
        answer(peak_rss=None),
        answer(elapsed=10**400),
        answer(elapsed=float("nan")),  # JSON's NaN, which no JSON encoder downstream takes
        answer(elapsed=float("inf")),
        answer(elapsed=-1.0),
        answer(peak_rss=-1),
        answer(peak_rss=True),
        answer(page_count=-1),
        answer(page_count=True),
        answer(page_count=0),  # fewer pages in the document than in the answer
        answer(size=-1),
        answer(size=1.5),
        VALID.replace(b"\xef\xbf\xbf", b"\xef\xbf"),  # a separator cut: not UTF-8
        b'{"ok": false, "code": "no_such_code"}\n',
        b'{"ok": false, "code": ["unhashable"]}\n',
        b'{"ok": false, "code": "too_large", "elapsed": 1' + b"0" * 400 + b"}\n",
    ],
)
def test_answers_that_are_not_well_formed_are_none(output):
    """Whatever a child writes, the parent gets an answer or None, never an exception."""
    assert decode_answer(VALID) == Extracted("0", 1, ["a"], {"k": "v"}, False, False, 0.1, 1)
    assert decode_answer(output) is None


def test_a_failures_figures_that_are_not_finite_are_left_out():
    """A failure whose figures are no real count keeps its code, without them."""
    for peak in (b"-1", b"true"):
        output = b'{"ok": false, "code": "too_large", "elapsed": NaN, "peak_rss": %s}\n' % peak
        error = decode_answer(output)
        assert isinstance(error, ExtractionError) and error.code == "too_large"
        assert (error.elapsed, error.peak_rss) == (None, None)


def test_a_timeout_of_weeks_is_a_timeout_like_any_other():
    """TIMEOUT takes any number of seconds: one past the longest single poll() (24.8 days)
    still extracts (no OverflowError from the wait for the answer)."""
    limits = {**LIMITS, "timeout": 30 * 86400.0}
    assert run(pdfs.simple(["patient"]), **limits).text == "patient"


def test_a_process_forked_while_the_layers_are_probed_can_ask_for_them():
    """A probe holds the layers' lock while its child runs; a process forked meanwhile
    (a prefork server, multiprocessing's fork) has a lock of its own and gets its answer."""
    with extraction._layers_lock:  # as a probe in another thread holds it
        pid = os.fork()
        if pid == 0:  # the forked process: its first question about the layers
            asking = threading.Thread(target=extraction.sandbox_layers, daemon=True)
            asking.start()
            asking.join(30)  # a hang fails the test, after this bound
            os._exit(1 if asking.is_alive() else 0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_copy_left_by_a_killed_worker_is_swept_and_a_live_ones_kept(tmp_path):
    """A worker killed (SIGKILL) while its byte source's job runs leaves the copy of those
    bytes: named after the worker as a staged upload is, the sweep of copies left by processes
    that ended removes it, and not the copy of a process that lives (this one's)."""
    import signal
    import textwrap

    from django_pdfpool.uploads import stage_chunks, sweep
    from tests.conftest import wait_until

    code = textwrap.dedent(f"""
        import asyncio, sys
        from django_pdfpool.sandbox import extract as sandbox
        sandbox.configure(warm=False, tmp_dir={str(tmp_path)!r})
        asyncio.run(sandbox.extract(sys.stdin.buffer.read(), **{LIMITS!r}))
    """)
    worker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        assert worker.stdin is not None
        with worker.stdin:
            worker.stdin.write(pdfs.slow_pdf("left behind", 8))
        wait_until(lambda: any(tmp_path.iterdir()), timeout=30)
        (left,) = list(tmp_path.iterdir())
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    live = stage_chunks([b"%PDF- a live process's"], "live.pdf", str(tmp_path))  # sweeps first
    try:
        sweep(str(tmp_path), None)
        assert list(tmp_path.iterdir()) == [Path(live.path)], left
    finally:
        live.discard()
