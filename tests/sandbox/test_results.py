"""One immutable result for every sharer: an Extraction cannot be changed in place and
round-trips JSON, pickle, copies and the Redis codec."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import pickle
import sys
import threading

import pytest

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool import Extraction, extract
from tests.conftest import until
from tests.support import pdfs
from tests.support.sandbox import LIMITS


def an_extraction(**changes) -> Extraction:
    values = dict(
        sha256="0" * 64,
        page_count=2,
        pages=["one", "two"],
        metadata={"Title": "t"},
        truncated=False,
        elapsed=0.1,
        peak_rss=1 << 20,
    )
    return Extraction(**{**values, **changes})


def test_an_extraction_cannot_be_changed_in_place():
    pdf = an_extraction()
    assert pdf.pages == ("one", "two") and pdf.text == "one\n\ntwo"
    with pytest.raises(AttributeError):
        pdf.pages.append("three")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        pdf.pages[0] = "changed"  # type: ignore[index]
    for change in (
        lambda m: m.__setitem__("Title", "x"),
        lambda m: m.__delitem__("Title"),
        lambda m: m.update(x="y"),
        lambda m: m.setdefault("x", "y"),
        lambda m: m.pop("Title"),
        lambda m: m.popitem(),
        lambda m: m.clear(),
    ):
        with pytest.raises(TypeError):
            change(pdf.metadata)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pdf.pages = ()  # type: ignore[misc]
    assert pdf == an_extraction() and dict(pdf.metadata) == {"Title": "t"}


def test_an_extraction_round_trips_json_pickle_and_copies():
    pdf = an_extraction(text_truncated=True, truncated=True)
    plain = pdf.as_dict()
    assert plain["pages"] == ["one", "two"] and plain["text"] == "one\n\ntwo"
    assert json.loads(json.dumps(plain)) == plain
    assert Extraction.from_dict(json.loads(json.dumps(plain))) == pdf
    assert "text" not in pdf.as_dict(text=False)
    assert json.dumps(pdf.metadata) == '{"Title": "t"}'
    assert dataclasses.asdict(pdf)["metadata"] == {"Title": "t"}
    for again in (pickle.loads(pickle.dumps(pdf)), copy.deepcopy(pdf), copy.copy(pdf)):
        assert again == pdf and again.text == pdf.text
        with pytest.raises(TypeError):
            again.metadata["x"] = "y"  # type: ignore[index]


def texts_read_at_once(pdf: Extraction, readers: int) -> list[str]:
    """``pdf.text`` as ``readers`` threads read it, all at once."""
    at_once, texts = threading.Barrier(readers), []

    def read() -> None:
        at_once.wait()
        texts.append(pdf.text)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return texts


def test_sharers_reading_the_text_at_once_share_one_join():
    """Every sharer's view reads ``text`` as it wakes: one join of the pages is made and kept,
    not one per thread that asked first (up to 8 MiB each; 4 bytes a character past U+FFFF)."""
    pages = [f"{n:080d}" for n in range(20_000)]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: between a join and keeping it too
    try:
        for _ in range(10):
            texts = texts_read_at_once(an_extraction(pages=pages, page_count=len(pages)), 8)
            assert len({id(text) for text in texts}) == 1
    finally:
        sys.setswitchinterval(switching)


def test_the_redis_codec_round_trips_an_extraction():
    from django_pdfpool.configured import _decode_result, _encode_result

    pdf = an_extraction()
    wire = json.loads(json.dumps(_encode_result(pdf)))
    assert "text" not in wire["extraction"]
    assert _decode_result(wire) == pdf


def test_sharers_get_equal_results_none_can_change(tmp_path):
    """Two callers sharing one job: the same answer for both; a view changing its pages or
    metadata in place fails instead of changing the other's."""
    from django_pdfpool.admission.local import Pool

    extraction.configure(tmp_dir=tmp_path)
    data = pdfs.simple(["shared page", "second"])

    async def both():
        pool = Pool(1, 1, None)

        async def job():  # on the pool's job loop: waits for the second caller to join
            await until(lambda: pool.waiting("doc") == 1)
            return await extract(data, **LIMITS)

        first = asyncio.create_task(pool.run("doc", "alice", job))
        await until(lambda: pool.running() == 1)
        second = await pool.run("doc", "bob", None)
        return await first, second

    try:
        first, second = asyncio.run(both())
    finally:
        extraction.configure(tmp_dir=None)
    assert first == second and first.pages == ("shared page", "second")
    with pytest.raises((TypeError, AttributeError)):
        first.pages.append("mine")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        first.metadata["Title"] = "mine"  # type: ignore[index]
    assert second.pages == ("shared page", "second")
