"""The example API's streamed answer (``example_project/uploads/results.py``, issue 24): the
Extraction's JSON, in chunks of 64 KiB or more rather than one per page, one chunk per turn of
the event loop."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from django_pdfpool import Extraction

RESULTS = Path(__file__).resolve().parents[2] / "example_project" / "uploads" / "results.py"


def results() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_results", RESULTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def many_pages(count: int = 300) -> Extraction:
    """A long document's result: many short pages, one of them with what JSON escapes."""
    pages = tuple(f"page {i}: " + "word " * 200 for i in range(count))
    pages = (*pages[:-1], 'quote " back\\slash \n tab\t é \U0001f600')
    return Extraction(
        sha256="ab" * 32,
        page_count=count,
        pages=pages,
        metadata={"Title": "many"},
        truncated=False,
        elapsed=0.5,
        peak_rss=1 << 20,
    )


def test_the_answer_is_the_extractions_json_in_few_large_chunks():
    """A 300-page answer (about 300 KB) comes as a handful of chunks of at least 64 KiB
    (the last may be shorter), not one or more per page; joined, it is the Extraction's
    JSON, pages or text."""
    module, pdf = results(), many_pages()
    for text in (False, True):
        chunks = list(module.chunked(pdf, text=text))
        assert all(len(chunk) >= module.CHUNK for chunk in chunks[:-1])
        assert len(chunks) <= sum(map(len, chunks)) // module.CHUNK + 1 < 10
        expected = pdf.as_dict(text=text)
        if text:
            del expected["pages"]
        assert json.loads(b"".join(chunks)) == expected


def test_a_streamed_answer_lets_the_event_loop_turn_between_chunks():
    """Under ASGI each chunk after the first waits for a turn of the loop: a callback
    scheduled meanwhile runs before the next chunk (a request on the same loop is not kept
    waiting for a whole answer)."""
    module, pdf = results(), many_pages()

    async def scenario() -> list[str]:
        seen: list[str] = []
        loop = asyncio.get_running_loop()
        async for _ in module._async(module.chunked(pdf, text=False)):
            seen.append("chunk")
            loop.call_soon(seen.append, "other")
        return seen

    seen = asyncio.run(scenario())
    chunks = seen.count("chunk")
    assert chunks > 2
    assert seen[: 2 * chunks - 1] == ["chunk", "other"] * (chunks - 1) + ["chunk"]
