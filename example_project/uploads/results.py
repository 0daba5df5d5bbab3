"""The API's answer for an extraction: its text once (the pages, or their joined text on
request) as UTF-8 JSON in chunks of 64 KiB or more, streamed. Under ASGI the chunks are built
once per job, in a worker thread, and shared by its sharers (the event loop neither encodes
nor copies text), then sent one per turn of the loop, so that a long document's answer does
not hold the loop for hundreds of writes in one callback."""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

from django_pdfpool import Extraction
from django_pdfpool.sandbox import PAGE_SEPARATOR

SLICE = 1 << 16  # characters of text per slice: at most 4 x 64 KiB of UTF-8 (6 x if escaped)
CHUNK = 1 << 16  # bytes: pieces are joined until a chunk has at least this many


def answer(request: HttpRequest, pdf: Extraction, *, text: bool) -> StreamingHttpResponse:
    """The streamed JSON answer: ``pages`` (a list), or with ``text`` the joined ``text``."""
    # Under ASGI Django would read a plain iterator whole before sending it: give it an
    # asynchronous one, which it sends chunk by chunk as the client takes them.
    if isinstance(request, ASGIRequest):
        content: Iterator[bytes] | AsyncIterator[bytes] = _async(pdf, text)
    else:  # a WSGI worker's thread builds them as it sends them
        content = chunked(pdf, text=text)
    return StreamingHttpResponse(content, content_type="application/json")


def chunked(pdf: Extraction, *, text: bool) -> Iterator[bytes]:
    """The JSON object in chunks of at least CHUNK bytes (the last may be shorter)."""
    held: list[bytes] = []
    size = 0
    for piece in _pieces(pdf, text=text):
        held.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield b"".join(held)
            held, size = [], 0
    if held:
        yield b"".join(held)


def _pieces(pdf: Extraction, *, text: bool) -> Iterator[bytes]:
    """The JSON object, in the order of ``Extraction.as_dict()``, a slice of text at a time."""
    yield b'{"sha256":%s,"page_count":%d,' % (_json(pdf.sha256), pdf.page_count)
    if text:
        yield b'"text":"'
        for index, page in enumerate(pdf.pages):
            if index:
                yield _escaped(PAGE_SEPARATOR)
            yield from _slices(page)
        yield b'"'
    else:
        yield b'"pages":['
        for index, page in enumerate(pdf.pages):
            yield b',"' if index else b'"'
            yield from _slices(page)
            yield b'"'
        yield b"]"
    rest = {
        "metadata": dict(pdf.metadata),
        "truncated": pdf.truncated,
        "text_truncated": pdf.text_truncated,
        "elapsed": pdf.elapsed,
        "peak_rss": pdf.peak_rss,
    }
    yield b"," + _json(rest)[1:]


def _slices(page: str) -> Iterator[bytes]:
    for start in range(0, len(page), SLICE):
        yield _escaped(page[start : start + SLICE])


def _escaped(text: str) -> bytes:
    """A JSON string's inside: UTF-8, only what JSON requires escaped (a lone surrogate, which
    a hostile child could send as an escape, becomes '?')."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "replace")


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")


async def _async(pdf: Extraction, text: bool) -> AsyncIterator[bytes]:
    """The shared chunks, one per turn of the loop: what else is ready runs between."""
    chunks = await asyncio.to_thread(built, pdf, text)
    for index, chunk in enumerate(chunks):
        if index:
            await asyncio.sleep(0)
        yield chunk


@dataclass
class _Answers:
    """One Extraction's answers, as long as it lives."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # held while one is built
    chunks: dict[bool, tuple[bytes, ...]] = field(default_factory=dict)  # by text=; lock


_answers: dict[int, _Answers] = {}  # by id() of a live Extraction; guarded by _guard
_guard = threading.Lock()


def built(pdf: Extraction, text: bool) -> tuple[bytes, ...]:
    """The answer's chunks: built by the first sharer to ask, the others wait for them."""
    with _guard:
        answers = _answers.get(id(pdf))
        if answers is None:
            answers = _answers[id(pdf)] = _Answers()
            # its callback takes no lock: a collection under _guard may run it
            weakref.finalize(pdf, _answers.pop, id(pdf), None)
    with answers.lock:
        if text not in answers.chunks:
            answers.chunks[text] = tuple(chunked(pdf, text=text))
        return answers.chunks[text]
