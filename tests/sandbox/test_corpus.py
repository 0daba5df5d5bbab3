"""The real PDFs of ../shared/corpus (skipped when absent): every readable file gives its
files.json page count and exactly in-process pypdf's text; 005 is encrypted, 017 malformed."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path

import pytest
from pypdf import PdfReader

from django_pdfpool import extract
from django_pdfpool.exceptions import ExtractionError
from tests.support.procs import child_pids, leftovers

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
LIMITS = {"timeout": 30.0, "memory_limit": 512 << 20}
EXPECTED_ERRORS = {"005": "encrypted", "017": "malformed"}


def entries() -> list[dict]:
    if not (CORPUS / "files.json").exists():
        return []
    return json.loads((CORPUS / "files.json").read_text())["data"]


def entry_id(entry: dict) -> str:
    return entry["path"].split("/")[0]


pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not entries(), reason=f"no corpus at {CORPUS}"),
]


def in_process(path: Path) -> list[str]:
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    return [page.extract_text() for page in PdfReader(path).pages]


@pytest.mark.parametrize("entry", entries(), ids=entry_id)
def test_corpus_file(entry):
    path = CORPUS / entry["path"]
    if not path.exists():
        pytest.skip(f"{entry['path']} missing from the corpus")
    before = child_pids()
    expected_error = EXPECTED_ERRORS.get(entry_id(entry)[:3])
    if expected_error:
        with pytest.raises(ExtractionError) as caught:
            asyncio.run(extract(path, **LIMITS))
        assert caught.value.code == expected_error
    else:
        result = asyncio.run(extract(path, **LIMITS))
        assert result.page_count == entry["pages"]
        assert list(result.pages) == in_process(path)
        assert result.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert result.peak_rss <= LIMITS["memory_limit"]
    assert leftovers(before) == set()


@pytest.mark.parametrize("entry", entries(), ids=entry_id)
def test_corpus_file_with_pdfium(entry):
    pytest.importorskip("pypdfium2")
    path = CORPUS / entry["path"]
    if not path.exists():
        pytest.skip(f"{entry['path']} missing from the corpus")
    expected_error = EXPECTED_ERRORS.get(entry_id(entry)[:3])
    if expected_error:
        with pytest.raises(ExtractionError) as caught:
            asyncio.run(extract(path, engine="pypdfium2", **LIMITS))
        assert caught.value.code == expected_error
    else:
        result = asyncio.run(extract(path, engine="pypdfium2", **LIMITS))
        assert result.page_count == entry["pages"]
        assert len(result.pages) == entry["pages"]
