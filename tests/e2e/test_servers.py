"""The example project under each server docs/deployment.md describes, as it documents them:
each serves one upload, and at SIGTERM with an extraction in flight gunicorn (threaded, and
with uvicorn workers) and hypercorn let it finish and exit cleanly. daphne, which speaks no
lifespan, serves an upload through ``PoolLifespan``. (uvicorn alone:
tests/e2e/test_example.py; runserver is not a production server.)"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.test_example import (
    PROJECT,
    addressed,
    api_post_async,
    demo_env,
    manage,
    until_state,
)
from tests.support import pdfs
from tests.support.pdfs import slow_pdf

GRACE = "60"  # seconds a server waits for open requests at SIGTERM: longer than any job here

SERVERS: dict[str, tuple[list[str], str]] = {  # name -> (command, its "listening" line)
    "gunicorn": (
        f"gunicorn demo.wsgi:application --bind 127.0.0.1:0 --workers 1 --threads 4 "
        f"--graceful-timeout {GRACE}".split(),
        r"Listening at: http://127\.0\.0\.1:(\d+)",
    ),
    "gunicorn-uvicorn": (
        f"gunicorn demo.asgi:application --bind 127.0.0.1:0 --workers 1 "
        f"--worker-class uvicorn_worker.UvicornWorker --graceful-timeout {GRACE}".split(),
        r"Listening at: http://127\.0\.0\.1:(\d+)",
    ),
    "hypercorn": (
        f"hypercorn demo.asgi:application --bind 127.0.0.1:0 --graceful-timeout {GRACE}".split(),
        r"Running on http://127\.0\.0\.1:(\d+)",
    ),
    "daphne": (
        ["daphne", "demo.asgi:application", "--bind", "127.0.0.1", "--port", "0"],
        r"Listening on TCP address 127\.0\.0\.1:(\d+)",
    ),
}


class Running:
    """A server process, its base URL and everything it logged so far."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: list[bytes]) -> None:
        self.process = process
        self.url = url
        self.log = log

    def text(self) -> str:
        return b"".join(self.log).decode(errors="replace")


@contextmanager
def serving(name: str, state: Path) -> Iterator[Running]:
    """``name`` serving the example project on a free loopback port; killed afterwards if
    the test did not stop it."""
    command, listening = SERVERS[name]
    env = {**os.environ, **demo_env(state, SLOTS=1)}
    process = subprocess.Popen(
        [sys.executable, "-m", *command],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    log: list[bytes] = []
    found = threading.Event()
    port: list[str] = []

    def read() -> None:  # keep reading: a full pipe would block the server
        assert process.stdout is not None
        for line in process.stdout:
            log.append(line)
            match = re.search(listening.encode(), line)
            if match and not found.is_set():
                port.append(match.group(1).decode())
                found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not found.wait(30):
            raise RuntimeError(f"{name} did not start:\n" + b"".join(log).decode())
        yield Running(process, f"http://127.0.0.1:{port[0]}", log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("servers-state")
    migrated = manage(directory, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    return directory


async def upload_then_sigterm(server: Running, data: bytes) -> httpx.Response | Exception:
    """Upload ``data``; once its extraction runs, SIGTERM the server (its master process)."""
    async with addressed("127.0.0.7") as client:
        first = await api_post_async(client, server.url, pdfs.simple(["served"]))
        assert first.status_code == 200, server.text()
        assert first.json()["pages"] == ["served"]
        request = asyncio.create_task(api_post_async(client, server.url, data))
        await until_state(client, server.url, data, "running")
        server.process.send_signal(signal.SIGTERM)
        try:
            return await request
        except httpx.HTTPError as error:
            return error


@pytest.mark.parametrize("name", ["gunicorn", "gunicorn-uvicorn", "hypercorn"])
def test_sigterm_lets_the_extraction_in_flight_finish(name: str, state: Path) -> None:
    data = slow_pdf(f"in flight under {name}", 1)
    with serving(name, state) as server:
        response = asyncio.run(upload_then_sigterm(server, data))
        assert server.process.wait(timeout=60) in (0, -signal.SIGTERM), server.text()
    assert isinstance(response, httpx.Response), (response, server.text())
    assert response.status_code == 200, response.text
    assert response.json()["pages"][0].startswith(f"in flight under {name}")
    assert "drain timed out" not in server.text() and "Traceback" not in server.text()


def test_daphne_serves_the_example_through_pool_lifespan(state: Path) -> None:
    """daphne sends no lifespan events; PoolLifespan passes every request through to Django.
    (What daphne does at SIGTERM, dropping the requests in flight, is docs/deployment.md's.)"""

    async def one_upload(url: str) -> httpx.Response:
        async with addressed("127.0.0.8") as client:
            return await api_post_async(client, url, pdfs.simple(["served by daphne"]))

    with serving("daphne", state) as server:
        response = asyncio.run(one_upload(server.url))
    assert response.status_code == 200, server.text()
    assert response.json()["pages"] == ["served by daphne"]


@pytest.mark.parametrize("view", ["sync", "async"])
def test_daphne_exits_at_sigterm_once_the_jobs_it_dropped_have_ended(view: str, tmp_path: Path):
    """daphne drops the requests in flight at SIGTERM; the process still ends (the pool's
    atexit hook finishing their jobs), its children and staged copies gone with it."""
    from tests.e2e.test_faults import client, until, working_child
    from tests.support.servers import serve

    staged = tmp_path / "staged"
    staged.mkdir()
    pool = {"SLOTS": 1, "WAIT": 30.0, "TIMEOUT": 30.0}
    field = "file" if view == "sync" else "document"

    async def dropped(url: str, pid: int) -> None:
        async with client("127.0.31.1") as http:
            files = {field: ("doc.pdf", slow_pdf(f"daphne {view}", 1), "application/pdf")}
            request = asyncio.create_task(http.post(f"{url}/{view}/", files=files))
            await until(lambda: working_child(pid))
            os.kill(pid, signal.SIGTERM)
            with pytest.raises(httpx.HTTPError):
                await request

    with serve("daphne", pdfpool=pool, staged=staged) as server:
        asyncio.run(dropped(server.url, server.pid))
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"daphne did not exit after SIGTERM:\n{server.text()}")
    assert "Killed 1 pending application instances" in server.text()
    assert list(staged.iterdir()) == []


@pytest.mark.parametrize(("name", "closed"), [("granian", True), ("hypercorn", False)])
def test_an_upload_reaching_a_view_after_sigterm_is_refused_where_the_worker_hears_it(
    name: str, closed: bool, tmp_path: Path
):
    """An upload whose headers were in before SIGTERM and whose body comes once the worker
    has stopped accepting: refused ``closed`` where the worker gets the signal (granian;
    uvicorn: tests/e2e/test_faults.py); hypercorn's master tells its workers by other means,
    and the pool takes the upload."""
    from tests.e2e.test_faults import held_upload, listening, until
    from tests.support.servers import read_all_sent, serve

    async def late(url: str, pid: int) -> tuple[int, dict]:
        go, sent = asyncio.Event(), asyncio.Event()
        request = asyncio.create_task(
            held_upload(url, pdfs.simple(["late"]), "127.0.34.1", go, sent)
        )
        port = int(url.rsplit(":", 1)[1])
        await until(lambda: sent.is_set() and read_all_sent(pid, port, "127.0.34.1"))
        workers = [p.pid for p in psutil.Process(pid).children() if listening(p.pid)]
        assert workers
        os.kill(pid, signal.SIGTERM)
        await until(lambda: not any(map(listening, workers)))  # their shutdown has begun
        go.set()
        return await request

    with serve(name, pdfpool={"WAIT": 30.0}, staged=tmp_path) as server:
        status, body = asyncio.run(late(server.url, server.pid))
        server.process.wait(timeout=30)
    if closed:
        assert (status, body["error"]) == (503, "closed"), body
    else:
        assert (status, body["pdf"]["text"]) == (200, "late"), body


# --- gunicorn's quick stop (SIGINT or SIGQUIT to the arbiter): SIGQUIT to each worker --------

QUICK = {"SLOTS": 1, "QUEUE": 4, "WAIT": 30.0, "TIMEOUT": 30.0}


async def post_sync(url: str, data: bytes, address: str) -> httpx.Response:
    from tests.e2e.test_faults import client

    async with client(address) as http:
        files = {"file": ("doc.pdf", data, "application/pdf")}
        return await http.post(f"{url}/sync/", files=files, headers={"accept": "application/json"})


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGQUIT], ids=["SIGINT", "SIGQUIT"])
def test_a_sync_workers_quick_stop_answers_the_upload_it_waits_for_503_closed(stop, tmp_path):
    """The worker's thread waits for the pool when gunicorn's SIGQUIT ends it: the upload is
    answered as a job the pool stopped (503 ``closed``, Retry-After), not gunicorn's 500 for
    an exception out of the application."""
    from tests.e2e.test_faults import assert_refusal, until, working_child
    from tests.support.servers import serve

    async def stopped(url: str, pid: int) -> httpx.Response:
        request = asyncio.create_task(post_sync(url, slow_pdf("quick", 3), "127.0.35.1"))
        await until(lambda: working_child(pid))
        os.kill(pid, stop)
        return await request

    with serve("gunicorn-sync", pdfpool=QUICK, staged=tmp_path) as server:
        response = asyncio.run(stopped(server.url, server.pid))
        server.process.wait(timeout=60)
    assert_refusal(response, 503, "closed")
    assert int(response.headers["retry-after"]) >= 1


def test_a_gthread_workers_quick_stop_answers_no_upload_500(tmp_path):
    """SIGQUIT with one job running, one queued and an upload whose body comes after it: the
    worker's threads finish before it exits, and the late upload, reaching the decorator once
    the exiting interpreter takes no new thread-pool work, is served (not a 500)."""
    from tests.e2e.test_faults import held_upload, until, working_child
    from tests.support.servers import read_all_sent, serve

    async def stopped(url: str, pid: int) -> tuple[list[httpx.Response], tuple[int, dict]]:
        running = asyncio.create_task(post_sync(url, slow_pdf("running", 3), "127.0.36.1"))
        await until(lambda: working_child(pid))
        queued = asyncio.create_task(post_sync(url, pdfs.simple(["queued"]), "127.0.36.2"))
        async with httpx.AsyncClient() as http:
            await until(lambda: one_queued(http, url))
        go, sent = asyncio.Event(), asyncio.Event()
        late = asyncio.create_task(held_upload(url, pdfs.simple(["late"]), "127.0.36.3", go, sent))
        port = int(url.rsplit(":", 1)[1])
        await until(lambda: sent.is_set() and read_all_sent(pid, port, "127.0.36.3"))
        os.kill(pid, signal.SIGQUIT)
        await until(lambda: "Worker exiting" in server.text())
        go.set()
        return await asyncio.gather(running, queued), await late

    async def one_queued(http: httpx.AsyncClient, url: str) -> bool:
        return (await http.get(f"{url}/snapshot/")).json()["queued"] == 1

    with serve("gunicorn-gthread", pdfpool=QUICK, staged=tmp_path) as server:
        answers, (late_status, late_body) = asyncio.run(stopped(server.url, server.pid))
        server.process.wait(timeout=60)
    assert [a.json()["pdf"]["text"][:7] for a in answers] == ["running", "queued"]
    assert (late_status, late_body["pdf"]["text"]) == (200, "late"), late_body
