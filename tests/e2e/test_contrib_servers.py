"""The contrib routes on real servers, over raw sockets: a 67 MB upload to each route kind
(DRF APIView, ``@api_view``, ViewSet action and create, django-ninja operation) is refused
413 before its body under uvicorn and granian, and read whole with the door off; the door
refuses a busy pool on a DRF route before the body; a DRF or ninja client leaving mid-job
leaves the job to the user sharing it. granian (``--interface asgi``) also
serves the example project's upload and drains at SIGTERM with an extraction in flight."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
from pathlib import Path

import httpx
import pytest

from django_pdfpool.record import format_digest
from tests.e2e.test_door_servers import (
    LIMIT,
    PATIENCE,
    MiB,
    answered,
    connect,
    continued,
    form_head,
    port_of,
    read_answer,
    settings,
)
from tests.e2e.test_example import PROJECT, addressed, api_post_async, demo_env, manage
from tests.e2e.test_servers import upload_then_sigterm
from tests.e2e.test_uvicorn import until
from tests.support import pdfs
from tests.support.pdfs import slow_pdf
from tests.support.procs import extraction_children
from tests.support.servers import granian, uvicorn, wait_for

APP = "tests.project.contrib_asgi:application"
CONTRIB = {"DJANGO_SETTINGS_MODULE": "tests.project.contrib_settings"}
ROUTES = [
    "/drf/apiview/held/",  # APIView.post
    "/drf/function/held/",  # @api_view
    "/drf/documents/",  # ViewSet create
    "/drf/documents/gated/",  # ViewSet @action
    "/ninja/held",  # django-ninja operation
]
HUGE = 67 * MiB


@pytest.fixture
def staged(tmp_path) -> Path:
    path = tmp_path / "staged"
    path.mkdir()
    return path


def credentials(route: str) -> str:
    """A user of the route's framework: the door asks its authentication first."""
    return "Bearer t-alice" if route.startswith("/ninja/") else "Token alice"


def refused_before_the_body(url: str, route: str) -> None:
    with connect(port_of(url), "127.0.6.1") as sock:
        sock.sendall(form_head(route, HUGE, authorization=credentials(route)))
        assert answered(sock, PATIENCE), route  # not a byte of the body sent
        _raw, status, fields, body = read_answer(sock)
    assert status == 413, (route, body)
    answer = json.loads(body)  # the framework's answer, through the project's handler
    assert answer["code"] == "too_large" and answer["handled_by"] == "project", route
    assert "detail" in answer and fields["connection"] == "close"


@pytest.mark.parametrize("server", ["uvicorn", "granian"])
def test_a_67_mb_upload_is_refused_before_its_body_on_each_route_kind(staged, server):
    run = uvicorn if server == "uvicorn" else granian
    with run(APP, pdfpool=settings(), staged=staged, env=CONTRIB) as running:
        for route in ROUTES:
            refused_before_the_body(running.url, route)


def test_with_the_door_off_the_body_is_awaited(staged):
    """The layer off: the body is asked for (``100 Continue``) and read whole, and only
    then answered: the view's own 413."""
    off = settings(DOOR=False)
    with (
        uvicorn(APP, pdfpool=off, staged=staged, env=CONTRIB) as running,
        connect(port_of(running.url), "127.0.6.2") as sock,
    ):
        sock.sendall(
            form_head("/drf/documents/", HUGE, authorization="Token alice", expect="100-continue")
        )
        assert continued(sock)
        sock.sendall(b"x" * HUGE)
        _raw, status, _fields, body = read_answer(sock)
    assert status == 413 and json.loads(body)["code"] == "too_large", body[:200]


def test_a_busy_pool_is_refused_before_the_body_through_each_frameworks_handler(staged):
    """A ViewSet action's job holds the only slot: uploads to an ``@api_view`` function and
    a ninja operation (no budget for bodies that may join) are 503 before their bodies,
    answered by the framework's handler."""
    with (
        uvicorn(APP, pdfpool=settings(DOOR={"BUDGET": 0}), staged=staged, env=CONTRIB) as running,
        concurrent.futures.ThreadPoolExecutor(1) as threads,
    ):

        def gated() -> httpx.Response:
            transport = httpx.HTTPTransport(local_address="127.0.6.3")
            with httpx.Client(transport=transport, timeout=60) as client:
                return client.post(
                    f"{running.url}/drf/documents/gated/",
                    files={"file": ("a.pdf", b"%PDF- gated")},
                    headers={"authorization": "Token bob", "accept": "application/json"},
                )

        first = threads.submit(gated)
        wait_for(lambda: _running(running.url) == 1, PATIENCE)
        try:
            for route in ("/drf/function/held/", "/ninja/held"):
                with connect(port_of(running.url), "127.0.6.4") as sock:
                    sock.sendall(
                        form_head(route, LIMIT - MiB // 2, authorization=credentials(route))
                    )
                    assert answered(sock, PATIENCE), route  # no body byte sent
                    _, status, fields, body = read_answer(sock)
                assert status == 503 and json.loads(body)["code"] == "busy", route
                assert json.loads(body)["handled_by"] == "project", route
                assert int(fields["retry-after"]) >= 1
        finally:
            (staged / "open").touch()
        assert first.result(PATIENCE).status_code == 200


@pytest.mark.parametrize("route", ["/drf/apiview/extract/", "/ninja/extract"])
def test_a_starter_that_disconnects_leaves_the_job_to_its_sharer(staged, route):
    """A DRF handler (sync, in a thread) or a ninja operation (async) whose client leaves
    mid-job: the job shared with another user's identical upload runs on, and that user
    gets its text; one job started, one completed, no copy left."""
    data = slow_pdf(f"left {route}", megabytes=2)
    digest = format_digest(hashlib.sha256(data).hexdigest())  # the door lets it join

    async def post(url: str, user: str, address: str) -> httpx.Response:
        transport = httpx.AsyncHTTPTransport(local_address=address)
        headers = {"authorization": credentials(route).replace("alice", user),
                   "accept": "application/json", "pdf-digest": digest}  # fmt: skip
        async with httpx.AsyncClient(transport=transport, timeout=PATIENCE) as client:
            files = {"file": ("doc.pdf", data, "application/pdf")}
            return await client.post(f"{url}{route}", files=files, headers=headers)

    async def scenario(url: str, pid: int) -> httpx.Response:
        starter = asyncio.create_task(post(url, "alice", "127.0.6.5"))
        await until(lambda: extraction_children(pid))
        sharer = asyncio.create_task(post(url, "bob", "127.0.6.6"))
        await until(lambda: _counters(url)["joined"] == 1)
        starter.cancel()  # closes the connection: the server cancels the request
        with pytest.raises(asyncio.CancelledError):
            await starter
        return await sharer

    with uvicorn(APP, pdfpool=settings(), staged=staged, env=CONTRIB) as server:
        response = asyncio.run(scenario(server.url, server.pid))
        assert response.status_code == 200, response.text
        assert f"left {route}" in response.json()["pdf"]["text"]
        wait_for(lambda: _counters(server.url)["completed"] == 1, PATIENCE)
        counted = _counters(server.url)
    assert (counted["started"], counted["cancelled"], counted["failed"]) == (1, 0, 0), counted
    assert list(staged.iterdir()) == []


def _counters(url: str) -> dict:
    return dict(httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()["counters"])


def _running(url: str) -> int:
    return int(httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()["running"])


# --- granian serving the example project ---------------------------------------------


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("granian-state")
    migrated = manage(directory, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    return directory


def test_granian_serves_the_example_and_drains_at_sigterm(state):
    data = slow_pdf("in flight under granian", 1)
    env = demo_env(state, SLOTS=1)
    with granian("demo.asgi:application", env=env, cwd=PROJECT) as server:
        response = asyncio.run(upload_then_sigterm(server, data))
        assert server.process.wait(timeout=60) == 0, server.text()
    assert isinstance(response, httpx.Response), (response, server.text())
    assert response.status_code == 200, response.text
    assert response.json()["pages"][0].startswith("in flight under granian")
    assert "drain timed out" not in server.text() and "Traceback" not in server.text()


def test_granian_serves_an_upload(state):
    async def one(url: str) -> httpx.Response:
        async with addressed("127.0.6.9") as client:
            return await api_post_async(client, url, pdfs.simple(["served by granian"]))

    with granian("demo.asgi:application", env=demo_env(state), cwd=PROJECT) as server:
        response = asyncio.run(one(server.url))
    assert response.status_code == 200, server.text()
    assert response.json()["pages"] == ["served by granian"]
