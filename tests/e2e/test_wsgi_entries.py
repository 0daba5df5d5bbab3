"""The rules at every WSGI entry, on real gunicorn workers spoken to over sockets:
``extract_pooled`` in a sync view answers as ``@pdf_pooled`` would."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import httpx

from tests.e2e.test_faults import until
from tests.e2e.test_servers import QUICK
from tests.support import pdfs
from tests.support.servers import read_all_sent, serve


async def half_sent(
    url: str, path: str, data: bytes, address: str, go: asyncio.Event, sent: asyncio.Event
) -> tuple[int, object]:
    """A form upload of ``data`` to ``path`` whose second half waits for ``go`` (``sent``:
    its headers and first half are written); the status and JSON of its answer."""
    host, port = url.removeprefix("http://").split(":")
    boundary = "wsgi-entry"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n'
        f"Content-Type: application/pdf\r\n\r\n".encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(address, 0))
    try:
        writer.write(head + body[: len(body) // 2])
        await writer.drain()
        sent.set()
        await go.wait()
        writer.write(body[len(body) // 2 :])
        await writer.drain()
        answer = await reader.read()  # the worker closes: it is exiting
    finally:
        writer.close()
    status, _, rest = answer.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    return int(status.split()[1]), json.loads(payload) if payload[:1] == b"{" else payload


def test_a_gthread_workers_quick_stop_serves_extract_pooled_in_a_late_view(tmp_path):
    """SIGQUIT while an upload's body is on its way to a sync view that calls
    ``extract_pooled``: the exiting worker serves it, as it serves ``@pdf_pooled``'s late
    upload (the call needs no new thread, which the exiting interpreter refuses)."""

    async def stopped(url: str, pid: int) -> tuple[int, object]:
        go, sent = asyncio.Event(), asyncio.Event()
        data = pdfs.simple(["late"])
        late = asyncio.create_task(half_sent(url, "/stored/sync/", data, "127.0.37.1", go, sent))
        port = int(url.rsplit(":", 1)[1])
        await until(lambda: sent.is_set() and read_all_sent(pid, port, "127.0.37.1"))
        os.kill(pid, signal.SIGQUIT)
        await until(lambda: "Worker exiting" in server.text())
        go.set()
        return await late

    with serve("gunicorn-gthread", pdfpool=QUICK, staged=tmp_path) as server:
        httpx.get(f"{server.url}/snapshot/", timeout=60)  # its worker has booted
        answer = asyncio.run(stopped(server.url, server.pid))
        server.process.wait(timeout=60)
    assert answer == (200, {"pages": 1}), server.text()[-3000:]
