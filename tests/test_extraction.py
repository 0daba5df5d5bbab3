"""extract() on valid PDFs the tests write themselves: results, sources, options, arguments,
callers on any loop in any thread, cancellation."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import io
import pickle
import subprocess
import sys
import threading
import time

import pytest
from pypdf import PdfReader

from django_pdfpool import extraction
from django_pdfpool.exceptions import EXTRACTION_MESSAGES as MESSAGES
from django_pdfpool.extraction import Extraction, ExtractionError, extract
from tests import pdfs
from tests.procs import child_pids, leftovers

LIMITS = {"timeout": 10.0, "memory_limit": 256 << 20}


@pytest.fixture
def copies(tmp_path):
    """Byte sources are copied into this directory; spares on, as by default."""
    directory = tmp_path / "copies"
    directory.mkdir()
    extraction.configure(spares=1, tmp_dir=directory)
    yield directory
    extraction.configure(tmp_dir=None)


def run(source, **options):
    return asyncio.run(extract(source, **{**LIMITS, **options}))


def test_result_fields(copies):
    data = pdfs.simple(["Hello world", "Second page"], title="A title")
    result = run(data)
    assert isinstance(result, Extraction)
    assert result.pages == ["Hello world", "Second page"]
    assert result.text == "Hello world\n\nSecond page"
    assert result.page_count == 2 and result.truncated is False
    assert result.metadata["Title"] == "A title"
    assert result.metadata["Producer"] == "tests/pdfs.py"
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert 0 < result.elapsed < LIMITS["timeout"]
    assert 0 < result.peak_rss <= LIMITS["memory_limit"]
    assert list(copies.iterdir()) == []


def test_text_equals_in_process_pypdf(copies):
    data = pdfs.reportlab_pdf(["First line\nsecond line", "Ünïcödé page", "", "last"])
    expected = [page.extract_text() for page in PdfReader(io.BytesIO(data)).pages]
    for warm in (True, False):
        assert run(data, warm=warm).pages == expected


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
    assert result.pages == ["page 1", "page 2"] and result.truncated
    assert result.page_count == 5
    assert run(data, max_pages=5).truncated is False
    with pytest.raises(ExtractionError) as caught:
        run(data, max_pages=2, on_too_many_pages="refuse")
    assert caught.value.code == "too_many_pages"


def test_file_larger_than_memory_limit_is_refused_at_once(copies):
    data = pdfs.simple(["x"]) + b"%" * (2 << 20)
    started = time.monotonic()
    with pytest.raises(ExtractionError) as caught:
        run(data, memory_limit=1 << 20)
    assert caught.value.code == "too_large"
    assert time.monotonic() - started < 1.0
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

    assert asyncio.run(scenario()) < 1.5  # did not wait for the job's own deadline
    assert leftovers(before, timeout=0) == set()
    assert list(copies.iterdir()) == []


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
        "import sys, django_pdfpool.extraction, django_pdfpool.sandbox.child_main\n"
        "bad = [m for m in sys.modules\n"
        "       if m.split('.')[0] == 'django' or m.startswith('django_pdfpool.admission')]\n"
        "print(bad)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr
