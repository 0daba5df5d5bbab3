"""End to end on a real uvicorn server: single-flight of identical uploads, and
the slot limit seen as child processes on the host while distinct uploads queue
or are refused."""

from __future__ import annotations

import asyncio
import hashlib
import time

import httpx
import pytest

from django_pdfpool.record import format_digest
from tests.support.pdfs import slow_pdf
from tests.support.procs import Sampler, extraction_children
from tests.support.servers import uvicorn

SLOTS, QUEUE = 2, 2


async def upload(url: str, data: bytes, address: str, *, declared: bool = False) -> httpx.Response:
    """POST from its own loopback address: each address is another anonymous caller;
    ``declared``: with the PDF's digest, so that the door lets it join (docs/door.md)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    headers = {"accept": "application/json"}
    if declared:
        headers["pdf-digest"] = format_digest(hashlib.sha256(data).hexdigest())
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:
        return await client.post(
            f"{url}/sync/", files={"file": ("doc.pdf", data, "application/pdf")}, headers=headers
        )


async def counters(url: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as client:
        return (await client.get(f"{url}/snapshot/")).json()["counters"]


async def until(condition, timeout: float = 30.0) -> None:
    """Poll ``condition()`` (sync, or async) until it is true; fail if it is not in time."""
    deadline = time.monotonic() + timeout
    while not (await value if asyncio.iscoroutine(value := condition()) else value):
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    return tmp_path_factory.mktemp("staged")


@pytest.fixture(scope="module")
def server(staged):
    settings = {
        "SLOTS": SLOTS,
        "QUEUE": QUEUE,
        "WAIT": 30.0,
    }
    with uvicorn(pdfpool=settings, staged=staged) as running:
        yield running


def test_identical_uploads_from_many_clients_run_one_child(server):
    """More identical uploads than places: those that declare their digest all get in
    (within the door's budget: one each) and share one child."""
    data = slow_pdf("identical", megabytes=1)  # all in before it ends: else started > 1
    clients = 8

    async def wave():
        return await asyncio.gather(
            *(upload(server.url, data, f"127.0.1.{i + 1}", declared=True) for i in range(clients))
        )

    with Sampler(server.pid) as sampler:
        responses = asyncio.run(wave())
    assert [r.status_code for r in responses] == [200] * clients
    texts = {r.json()["pdf"]["text"] for r in responses}
    assert len(texts) == 1 and "identical" in texts.pop()
    assert sampler.peak == 1 and len(sampler.pids) == 1
    done = asyncio.run(counters(server.url))
    assert (done["started"], done["joined"]) == (1, clients - 1)


def test_distinct_uploads_see_exactly_slots_children_and_the_rest_queue_or_503(server):
    before = asyncio.run(counters(server.url))
    clients = 8

    # All at once: which ones run is the pool's business; that SLOTS run, QUEUE wait and
    # the rest are refused needs only that all arrive before the first job (1 s, far longer
    # at the children's nice on a busy machine) ends: else fewer than 4 would be refused.
    documents = [slow_pdf(f"distinct-{i}", megabytes=1) for i in range(clients)]

    async def wave():
        return await asyncio.gather(
            *(upload(server.url, data, f"127.0.2.{i + 1}") for i, data in enumerate(documents))
        )

    with Sampler(server.pid) as sampler:
        responses = asyncio.run(wave())
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == SLOTS + QUEUE
    assert statuses.count(503) == clients - SLOTS - QUEUE
    assert all(int(r.headers["retry-after"]) >= 1 for r in responses if r.status_code == 503)
    assert sampler.peak == SLOTS
    assert len(sampler.pids) == SLOTS + QUEUE  # one child per job, each used once
    after = asyncio.run(counters(server.url))
    assert after["started"] - before["started"] == SLOTS + QUEUE
    assert after["refused_busy"] - before["refused_busy"] == clients - SLOTS - QUEUE
    assert extraction_children(server.pid) == []


def test_a_starter_that_disconnects_leaves_the_job_to_its_sharers(server, staged):
    before = asyncio.run(counters(server.url))
    data = slow_pdf("disconnect", megabytes=2)

    async def scenario():
        starter = asyncio.create_task(upload(server.url, data, "127.0.3.1"))
        await until(lambda: extraction_children(server.pid))
        sharer = asyncio.create_task(upload(server.url, data, "127.0.3.2"))

        async def joined() -> bool:
            return (await counters(server.url))["joined"] - before["joined"] == 1

        await until(joined)  # the sharer is in, with the job still running
        starter.cancel()  # closes the connection: uvicorn cancels the view
        with pytest.raises(asyncio.CancelledError):
            await starter
        return await sharer

    response = asyncio.run(scenario())
    assert response.status_code == 200
    assert "disconnect" in response.json()["pdf"]["text"]
    after = asyncio.run(counters(server.url))
    assert after["started"] - before["started"] == 1
    assert after["completed"] - before["completed"] == 1
    assert list(staged.iterdir()) == []
