"""The example API's streamed answer (``example_project/uploads/results.py``): the
Extraction's JSON, in chunks of 64 KiB or more rather than one per page; under ASGI built once
per job in a worker thread, shared by its sharers, sent one chunk per turn of the event loop."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import sys
import threading
from pathlib import Path
from types import ModuleType

from django_pdfpool import Extraction

RESULTS = Path(__file__).resolve().parents[2] / "example_project" / "uploads" / "results.py"


def results() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_results", RESULTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclass is looked up while it is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
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
        async for _ in module._async(pdf, False):
            seen.append("chunk")
            loop.call_soon(seen.append, "other")
        return seen

    seen = asyncio.run(scenario())
    chunks = seen.count("chunk")
    assert chunks > 2
    assert seen[: 2 * chunks - 1] == ["chunk", "other"] * (chunks - 1) + ["chunk"]


def test_sharers_get_one_answer_built_once_off_the_loop():
    """Twelve sharers of one Extraction, at once, on one loop: the chunks are built once, in
    a worker thread, and every sharer sends those same bytes; they go with the Extraction."""
    module, pdf = results(), many_pages()
    builders: list[threading.Thread] = []
    chunked = module.chunked

    def counted(pdf: Extraction, *, text: bool):  # the module's own, its builders recorded
        builders.append(threading.current_thread())
        return chunked(pdf, text=text)

    module.chunked = counted

    async def sharer(pdf: Extraction) -> list[bytes]:
        return [chunk async for chunk in module._async(pdf, False)]

    async def scenario(pdf: Extraction) -> tuple[list[list[bytes]], threading.Thread]:
        answers = await asyncio.gather(*(sharer(pdf) for _ in range(12)))
        return answers, threading.current_thread()

    answers, loop_thread = asyncio.run(scenario(pdf))
    assert len(builders) == 1 and builders[0] is not loop_thread
    assert all(answer == answers[0] for answer in answers)
    assert all(a is b for answer in answers for a, b in zip(answer, answers[0], strict=True))
    assert json.loads(b"".join(answers[0])) == pdf.as_dict(text=False)
    key = id(pdf)
    assert key in module._answers
    del pdf, answers
    gc.collect()
    assert key not in module._answers  # nothing kept once the Extraction is gone
