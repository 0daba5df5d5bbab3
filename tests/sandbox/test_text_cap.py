"""The text cap: a text bomb costs the parent a bound, text over the cap comes back cut
and flagged, the engine stops reading, the parent refuses an answer over the cap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool.conf import DEFAULTS
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox.engines import TextBudget, extract_pages, fit, utf8_size
from django_pdfpool.sandbox.wire import (
    DEFAULT_MAX_TEXT_BYTES,
    Extracted,
    answer_limit,
    encode_answer,
)
from tests.support import pdfs
from tests.support.sandbox import run

ROOT = Path(__file__).resolve().parents[2]


BOMB_PROBE = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from django_pdfpool.conf import DEFAULTS
    from django_pdfpool import extract
    from django_pdfpool.sandbox import configure
    from tests.support import pdfs
    def hwm():
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM"))

    data = pdfs.text_bomb()
    configure(warm=False)
    gc.collect()
    before = hwm()
    # extract()'s own defaults: MAX_TEXT_BYTES's (checked below)
    result = asyncio.run(extract(data, timeout=60.0, memory_limit=DEFAULTS["MEMORY_LIMIT"]))
    size = len(result.text.encode())  # the joined text counts too
    print(json.dumps({"growth": hwm() - before, "file": len(data), "text_bytes": size,
                      "truncated": result.truncated,
                      "text_truncated": getattr(result, "text_truncated", None)}))
    """
)


FAKE_CHILD = """#!/bin/sh
# Stands in for the interpreter: says ready, reads the job, answers with far too much.
printf 'ready\\n'
read job
printf 'started\\n'
head -c {size} /dev/zero | tr '\\0' 'a' | sed 's/^/{{"ok":true,"pages":["/'
printf '"]}}\\n'
"""


def test_a_text_bomb_grows_the_parent_by_less_than_96_mib():
    """17 KB that show 16 M emoji (64 MB of UTF-8): with the default settings the answer is
    cut at MAX_TEXT_BYTES and the parent's peak resident set grows by under 96 MiB."""
    proc = subprocess.run(
        [sys.executable, "-c", BOMB_PROBE],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    print(found)
    assert found["file"] < 20_000
    assert found["growth"] < 96 << 20, found
    assert found["truncated"] and found["text_truncated"]
    assert DEFAULTS["MAX_TEXT_BYTES"] - 16 <= found["text_bytes"] <= DEFAULTS["MAX_TEXT_BYTES"]


def test_the_sandbox_default_cap_is_the_settings_default():
    assert DEFAULTS["MAX_TEXT_BYTES"] == DEFAULT_MAX_TEXT_BYTES


@pytest.mark.parametrize("engine", ["pypdf", "pypdfium2"])
def test_text_over_the_cap_comes_back_cut_and_flagged(engine, tmp_path):
    if engine == "pypdfium2":
        pytest.importorskip("pypdfium2")
    extraction.configure(tmp_dir=tmp_path)
    data = pdfs.simple(["a" * 1500, "b" * 1500, "c" * 1500])
    whole = run(data, engine=engine)
    assert not whole.truncated and not whole.text_truncated and len(whole.pages) == 3
    cut = run(data, engine=engine, max_text_bytes=2048)
    assert cut.truncated and cut.text_truncated and cut.page_count == 3
    assert cut.pages[0] == whole.pages[0]
    assert len(cut.pages) == 2 and whole.pages[1].startswith(cut.pages[1]) and cut.pages[1]
    assert 2000 <= len(cut.text.encode()) <= 2048
    extraction.configure(tmp_dir=None)


def test_max_pages_alone_leaves_text_truncated_false(tmp_path):
    extraction.configure(tmp_dir=tmp_path)
    result = run(pdfs.simple(["one", "two"]), max_pages=1)
    assert result.truncated and not result.text_truncated
    extraction.configure(tmp_dir=None)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_max_text_bytes_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError):
        run(pdfs.simple(["x"]), max_text_bytes=bad)


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii " * 50,
        "\U0001f4a3" * 300,
        'quotes " and \\ ' * 40,
        "\x01\n\t" * 200,
        "caf\u00e9 \u4e2d\u6587 " * 80,
        "lone \ud800 surrogate " * 40,
    ],
)
def test_a_cut_page_fits_its_room_and_is_a_prefix(text):
    for room in (0, 1, 5, 6, 7, 100, 333, 1000):
        part = fit(text, room)
        assert text.startswith(part) and utf8_size(part) <= room
        if utf8_size(text) > room:
            assert utf8_size(part) > room - 4  # short of the room by one character at most
    budget = TextBudget(500)
    while budget.add(text):
        pass
    answer = encode_answer(Extracted("0" * 64, 9, budget.pages, {}, True, True))
    assert budget.cut and len(answer.partition(b"\n")[2]) <= 500  # the text the parent reads


def test_text_whose_utf8_fits_the_cap_comes_back_whole(tmp_path):
    """The cap counts the text's UTF-8: quotes, backslashes and newlines, which JSON would
    escape, cost a byte each."""
    extraction.configure(tmp_dir=tmp_path)
    text = '"' * 500 + "\\" * 250
    result = run(pdfs.simple([text]), max_text_bytes=1024)
    extraction.configure(tmp_dir=None)
    assert result.text == text and not result.truncated


def test_the_engine_stops_reading_pages_once_the_cap_is_spent():
    data = pdfs.simple([f"page {i} " + "x" * 100 for i in range(50)])
    found = extract_pages("pypdf", data, max_pages=None, refuse=False, max_text_bytes=1024)
    assert len(found["pages"]) <= 10 and found["text_truncated"] and found["truncated"]
    assert found["page_count"] == 50


def test_the_parent_refuses_an_answer_over_the_cap_plus_overhead(tmp_path):
    """A child that ignores the cap (a compromised one) is killed once its answer passes the
    text cap plus the metadata's and fields' overhead: too_large, never read whole."""
    fake = tmp_path / "python"
    cap = 4096
    fake.write_text(FAKE_CHILD.format(size=answer_limit(cap) + (1 << 20)))
    fake.chmod(0o755)
    extraction.configure(python=str(fake), warm=False)
    try:
        with pytest.raises(ExtractionError) as caught:
            run(pdfs.simple(["x"]), max_text_bytes=cap, warm=False)
        assert caught.value.code == "too_large"
    finally:
        extraction.configure(python=sys.executable, warm=True)


DECLARING_CHILD = """#!/bin/sh
# Stands in for the interpreter: its answer's header declares far too much, then it waits.
printf 'ready\\n'
read job
printf 'started\\n{{"ok": true, "size": {size}}}\\n'
exec sleep 60
"""


def test_an_answer_declaring_more_than_the_cap_is_refused_at_its_header(tmp_path):
    """A child whose answer's header declares more than the parent would read is killed at
    once (too_large), not waited for until the deadline."""
    fake = tmp_path / "python"
    cap = 4096
    fake.write_text(DECLARING_CHILD.format(size=answer_limit(cap) + 1))
    fake.chmod(0o755)
    extraction.configure(python=str(fake), warm=False)
    began = time.monotonic()
    try:
        with pytest.raises(ExtractionError) as caught:
            run(pdfs.simple(["x"]), max_text_bytes=cap, warm=False, timeout=60.0)
        error = caught.value
        assert (error.code, error.detail) == ("too_large", "answer larger than allowed")
        assert time.monotonic() - began < 30  # not the deadline
    finally:
        extraction.configure(python=sys.executable, warm=True)


FILLING_CHILD = """#!{python}
# Stands in for the interpreter: a 1 MiB answer pipe (F_SETPIPE_SZ), filled with no header.
import fcntl, os, sys
fcntl.fcntl(1, 1031, 1 << 20)
os.write(1, b"ready\\n")
sys.stdin.buffer.readline()
block = b"started\\n" + b"a" * ((1 << 20) - 8)
while True:
    os.write(1, block)
"""


def test_the_parent_reads_no_more_than_it_allows_however_full_the_pipe(tmp_path):
    """A child that enlarged its answer pipe to 1 MiB and filled it: the parent reads one byte
    past what it allows, then kills it (a read of the whole pipe took 1 MiB)."""
    import fcntl
    import termios

    from django_pdfpool.sandbox import children

    fake = tmp_path / "python"
    fake.write_text(FILLING_CHILD.format(python=sys.executable))
    fake.chmod(0o755)
    child = children.Child((str(fake), (), (), "none", 0))
    try:
        assert child.send(b"{}\n")
        fd, buffered = child._answer.fileno(), bytearray(4)
        deadline = time.monotonic() + 30
        while int.from_bytes(buffered, sys.byteorder) < 512 << 10:  # the pipe filling
            assert time.monotonic() < deadline
            fcntl.ioctl(fd, termios.FIONREAD, buffered)
            time.sleep(0.001)
        allowed = 64 << 10
        outcome = child.receive(time.monotonic() + 30, allowed)
    finally:
        children.drop(child)
    assert outcome.overflow
    assert len(outcome.output) == allowed + 1
