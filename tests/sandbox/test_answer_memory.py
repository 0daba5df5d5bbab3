"""An answer costs the parent about what it says: its pieces are counted before any is made,
so 2 million pages (9.5 MiB) are refused at the count instead of growing the server by ~130
MiB of str objects (docs/security.md)."""

from __future__ import annotations

import tracemalloc

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox.wire import MAX_ANSWER_PAGES, Extracted, decode_answer, encode_answer
from tests.support import pdfs
from tests.support.many_pages import ENGINE, hostile_answer
from tests.support.sandbox import run


def test_an_answer_of_two_million_pages_grows_the_server_by_under_twice_its_bytes():
    extraction.register_engine(ENGINE)
    data = pdfs.simple(["many pages"])
    size = len(hostile_answer(data))
    assert size > 9 << 20
    tracemalloc.start()
    try:
        outcome = run(data, engine=ENGINE, warm=False, memory_limit=1 << 30, timeout=60)
    except ExtractionError as error:
        outcome = error
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 2 * size, f"{peak / 2**20:.1f} MiB for an answer of {size / 2**20:.1f} MiB"
    assert isinstance(outcome, ExtractionError) and outcome.code == "too_large"


def decoded(extracted: Extracted) -> tuple[object, int, int, int]:
    """``extracted`` encoded, then decoded under tracemalloc: the answer, the line's size,
    and the bytes held after and at the peak (the line itself counted in neither)."""
    line = bytearray(encode_answer(extracted))
    size = len(line)  # decoding empties it
    tracemalloc.start()
    try:
        answer = decode_answer(line)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return answer, size, held, peak


def test_an_answer_holds_its_bytes_and_a_str_per_page():
    """The most pages an answer may have, 80 ASCII bytes each: what the parent keeps."""
    pages = [f"{n:080d}" for n in range(MAX_ANSWER_PAGES)]
    answer, size, held, peak = decoded(Extracted("0" * 64, len(pages), pages, {}, False))
    del pages
    assert isinstance(answer, Extracted) and len(answer.pages) == MAX_ANSWER_PAGES
    per_page = (held - size) / MAX_ANSWER_PAGES
    assert held < size + 64 * MAX_ANSWER_PAGES, per_page  # the buffer was emptied: no copy kept
    assert peak < 2 * size + 64 * MAX_ANSWER_PAGES, peak


def test_an_honest_answer_past_the_page_cap_is_cut_and_says_so():
    pages = [""] * (MAX_ANSWER_PAGES + 1)
    answer = decode_answer(encode_answer(Extracted("0", len(pages), pages, {}, False)))
    assert isinstance(answer, Extracted) and answer.truncated
    assert len(answer.pages) == MAX_ANSWER_PAGES and answer.page_count == MAX_ANSWER_PAGES + 1


def test_a_page_with_one_character_past_u_ffff_is_held_at_4_bytes_a_character():
    """What docs/performance.md tells operators to size for: a str holds every character of
    a page in the width of its widest, so 8 MiB of ASCII and one emoji take 32 MiB."""
    page = "a" * (8 << 20) + "\U0001f4a3"
    answer, size, held, peak = decoded(Extracted("0" * 64, 1, [page], {}, False))
    del page
    assert isinstance(answer, Extracted) and len(answer.pages[0]) == (8 << 20) + 1
    assert 3.9 * size < held < 4.1 * size, held / size
    assert peak < 5.1 * size, peak / size  # the buffer, emptied, and the page


def test_the_largest_answer_is_decoded_off_the_callers_event_loop():
    """An answer of the most pages allowed takes tens of ms of CPU to decode: not on the
    caller's loop (an ASGI server's, serving every other request), whose thread spends well
    under that on the whole job (CPU time: what a loaded host's scheduling does not blur)."""
    import asyncio
    import time

    from django_pdfpool import extract
    from tests.sandbox.hostile_engines import MOST_PAGES, most_pages

    extraction.register_engine(MOST_PAGES)
    data = pdfs.simple(["many"])
    line = encode_answer(Extracted("0" * 64, MAX_ANSWER_PAGES, most_pages(data), {}, False))
    start = time.thread_time()
    decode_answer(bytearray(line))
    decoding = time.thread_time() - start

    async def scenario() -> tuple[int, float]:
        start = time.thread_time()
        job = extract(data, engine=MOST_PAGES, timeout=60, memory_limit=1 << 30, warm=False)
        pages = len((await job).pages)
        return pages, time.thread_time() - start

    pages, on_the_loop = asyncio.run(scenario())
    assert pages == MAX_ANSWER_PAGES
    assert on_the_loop < decoding / 2, (on_the_loop, decoding)
