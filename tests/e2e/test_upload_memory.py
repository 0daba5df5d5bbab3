"""Callers waiting on one job under uvicorn: each keeps no copy of its raw body in the
server's memory once it is staged (Django's ASGI handler spools a body of up to
FILE_UPLOAD_MAX_MEMORY_SIZE in memory until its request ends)."""

from __future__ import annotations

import asyncio
import time
import zlib

import httpx

from tests.support import pdfs
from tests.support.procs import status_kb
from tests.support.servers import uvicorn

MiB = 1 << 20
CALLERS = 30


def slow_and_large(size: int) -> bytes:
    """A PDF that keeps its child busy for seconds, padded to ``size`` bytes (under 2.5 MiB)."""
    ops = b"BT /F1 12 Tf (t) Tj " + b"1 0 0 1 72 720 Tm (a) Tj " * (6 * MiB // 25) + b"ET"
    objects = pdfs.document([b""])
    objects[4] = pdfs.stream(zlib.compress(ops, 6), b"/Filter /FlateDecode ")
    return pdfs.assemble([*objects, pdfs.stream(b"0" * size)])


def test_callers_sharing_a_job_hold_no_copy_of_their_raw_body(tmp_path):
    data = slow_and_large(2 * MiB)
    with uvicorn(pdfpool={"TIMEOUT": 120}, staged=tmp_path) as server:
        with httpx.Client(timeout=60) as client:  # imports and caches paid before idle
            files = {"document": ("warm.pdf", pdfs.simple(["warm"]), "application/pdf")}
            assert client.post(server.url + "/async/", files=files).status_code == 200
        idle = status_kb(server.pid, b"VmRSS") * 1024

        async def one(n: int) -> int:  # each from a network of its own: a caller each
            transport = httpx.AsyncHTTPTransport(local_address=f"127.0.{n + 1}.1")
            async with httpx.AsyncClient(transport=transport, timeout=180) as client:
                headers = {"Content-Type": "application/pdf"}
                answer = await client.post(server.url + "/async/", content=data, headers=headers)
                return answer.status_code

        async def held_once_all_wait() -> int | None:
            async with httpx.AsyncClient(timeout=30) as client:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    jobs = (await client.get(server.url + "/snapshot/")).json()["jobs"]
                    if jobs and jobs[0]["sharers"] >= CALLERS:
                        return status_kb(server.pid, b"VmRSS") * 1024 - idle
                    await asyncio.sleep(0.05)
            return None

        async def all_of_them() -> int | None:
            watching = asyncio.create_task(held_once_all_wait())
            await asyncio.gather(*(one(n) for n in range(CALLERS)))
            return await watching

        held = asyncio.run(all_of_them())
    assert held is not None, "the callers never all waited on the job"
    # each body held whole while its caller waits: 60 MiB more; let go once staged: about 20
    assert held < CALLERS * len(data) * 0.6, f"{held / MiB:.1f} MiB for {CALLERS} callers"
