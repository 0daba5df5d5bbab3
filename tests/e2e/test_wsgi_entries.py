"""The rules at every WSGI entry, on real gunicorn workers spoken to over sockets:
``extract_pooled`` in a sync view answers as ``@pdf_pooled`` would."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx

from tests.e2e.test_faults import held_upload, until
from tests.e2e.test_servers import QUICK
from tests.support import pdfs
from tests.support.servers import read_all_sent, serve


def test_a_gthread_workers_quick_stop_serves_extract_pooled_in_a_late_view(tmp_path):
    """SIGQUIT while an upload's body is on its way to a sync view that calls
    ``extract_pooled``: the exiting worker serves it, as it serves ``@pdf_pooled``'s late
    upload (the call needs no new thread, which the exiting interpreter refuses)."""

    async def stopped(url: str, pid: int) -> tuple[int, object]:
        go, sent = asyncio.Event(), asyncio.Event()
        data = pdfs.simple(["late"])
        late = asyncio.create_task(held_upload(url, data, "127.0.37.1", go, sent, "/stored/sync/"))
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
