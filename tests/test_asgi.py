"""``KeptThreads``: under Django's own ASGI handler, a request's sync code runs on a thread
kept from earlier requests (without the wrapper, on a new thread each time); a thread still
running a request's code is not lent to the next; at most ``keep`` wait; a task outliving
its request is refused thread-sensitive calls; every other scope passes through. ``PdfPoolDoor``
steps aside for a host Django does not serve, and a query string it cannot read."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from django.conf.urls.i18n import i18n_patterns
from django.core.asgi import get_asgi_application
from django.http import StreamingHttpResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import path as route

from django_pdfpool import KeptThreads
from django_pdfpool.asgi import THREAD_NAME
from tests.project.views import Orphans, Threads, sync_extract
from tests.support.door import answer_of, asgi_post
from tests.support.pdfs import slow_pdf
from tests.support.procs import extraction_children

DEADLINE = 30.0


def scope(query: str = "", path: str = "/threaded/") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }


async def get(app: Any, query: str = "") -> dict[str, Any]:
    """One request to the ``threaded`` view through ``app``: its JSON answer."""
    talk = ApplicationCommunicator(app, scope(query))
    await talk.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await talk.receive_output(DEADLINE)
    assert start["status"] == 200, start
    body = await talk.receive_output(DEADLINE)
    await talk.wait(DEADLINE)
    return json.loads(body["body"])


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def released():
    Threads.hold.clear()
    Threads.holding.clear()
    yield
    Threads.hold.set()


async def three(app: Any) -> list[dict[str, Any]]:
    return [await get(app), await get(app), await get(app)]


def test_requests_in_turn_run_their_sync_code_on_one_kept_thread():
    kept = KeptThreads(get_asgi_application())
    seen = asyncio.run(three(kept))
    assert [answer["before"] for answer in seen] == [0, 1, 2]
    assert {answer["ident"] for answer in seen} == {seen[0]["ident"]}
    assert seen[0]["thread"].startswith(THREAD_NAME)
    wait_for(lambda: kept.waiting() == 1, "the thread to be idle again")


def test_without_it_django_starts_a_thread_for_each_request():
    """The layer off: the count a thread keeps is new each time, so the test above can fail."""
    seen = asyncio.run(three(get_asgi_application()))
    assert [answer["before"] for answer in seen] == [0, 0, 0]


def test_a_thread_busy_with_a_cancelled_applications_code_is_not_lent_until_it_is_done(released):
    """The server cancels the application (a shutdown's timeout): the view's sync code runs
    on, holding its thread, which is given back only when that code ends."""
    kept = KeptThreads(get_asgi_application())

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        first = await get(kept)
        held = ApplicationCommunicator(kept, scope("hold=1"))
        await held.send_input({"type": "http.request", "body": b"", "more_body": False})
        await asyncio.get_running_loop().run_in_executor(None, Threads.holding.wait, DEADLINE)
        held.future.cancel()
        await held.wait(DEADLINE)  # the application has ended; its thread has not
        assert kept.waiting() == 0
        other = await get(kept)  # did not wait behind the held thread
        return first, other

    first, other = asyncio.run(scenario())
    assert Threads.holding.is_set() and not Threads.hold.is_set()
    assert other["ident"] != first["ident"] and other["before"] == 0
    wait_for(lambda: kept.waiting() == 1, "the other request's thread to be idle")
    Threads.hold.set()
    wait_for(lambda: kept.waiting() == 2, "the held thread to be given back once done")


def test_a_client_that_goes_away_ends_its_request_when_its_sync_code_does(released):
    """A disconnect cancels the view's task (Django >= 5.0); Django then sends
    ``request_finished`` on the request's thread, behind the view still running there, as
    under Django's own handler. Meanwhile another request gets another thread."""
    kept = KeptThreads(get_asgi_application())

    async def scenario() -> None:
        held = ApplicationCommunicator(kept, scope("hold=1"))
        await held.send_input({"type": "http.request", "body": b"", "more_body": False})
        await asyncio.get_running_loop().run_in_executor(None, Threads.holding.wait, DEADLINE)
        await held.send_input({"type": "http.disconnect"})
        other = await get(kept)  # did not wait behind the held thread
        assert other["before"] == 0 and not held.future.done()
        Threads.hold.set()
        await held.wait(DEADLINE)

    asyncio.run(scenario())
    wait_for(lambda: kept.waiting() == 2, "both threads to wait again")


def test_a_cancelled_request_is_told_its_client_left_so_its_sync_view_ends_first(pdfpool):
    """A server that cancels the application and then stops its loop (daphne at SIGTERM):
    Django's handler leaves its view's task running, and a sync view waiting on the loop for
    its job would wait for ever; told its client left, it ends before the application does,
    while the job runs on."""
    pdfpool(SLOTS=1, WAIT=30.0, TIMEOUT=30.0)
    kept = KeptThreads(get_asgi_application())
    data = slow_pdf("cancelled")  # about a second of work: running past the cancel

    async def scenario() -> None:
        talk = ApplicationCommunicator(kept, asgi_post("/sync/", data))
        await talk.send_input({"type": "http.request", "body": data, "more_body": False})
        deadline = time.monotonic() + DEADLINE
        while not extraction_children(os.getpid()):
            assert time.monotonic() < deadline, "gave up waiting for the job to start"
            await asyncio.sleep(0.01)
        talk.future.cancel()
        await talk.wait(DEADLINE)
        assert kept.waiting() == 1  # the view's thread was given back with the application
        assert extraction_children(os.getpid())  # its job runs on

    asyncio.run(scenario())


def test_a_task_outliving_its_request_is_refused_thread_sensitive_calls():
    """asgiref's rule for a context with an executor (docs/deployment.md): under Django's own
    handler the same call runs, on a thread started for it."""

    async def run(app: Any) -> object:
        Orphans.go.clear()
        Orphans.outcome.clear()
        talk = ApplicationCommunicator(app, scope(path="/orphaned/"))
        await talk.send_input({"type": "http.request", "body": b"", "more_body": False})
        assert (await talk.receive_output(DEADLINE))["status"] == 200
        await talk.receive_output(DEADLINE)
        await talk.wait(DEADLINE)
        Orphans.go.set()
        assert Orphans.task is not None
        await asyncio.wait_for(Orphans.task, DEADLINE)
        return Orphans.outcome[0]

    refused = asyncio.run(run(KeptThreads(get_asgi_application())))
    assert isinstance(refused, RuntimeError), refused
    assert isinstance(asyncio.run(run(get_asgi_application())), int)


def test_at_most_keep_idle_threads_are_kept_and_the_rest_end():
    kept = KeptThreads(get_asgi_application(), keep=0)
    before = {t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)}
    seen = asyncio.run(three(kept))
    assert [answer["before"] for answer in seen] == [0, 0, 0]
    assert kept.waiting() == 0

    def ended() -> bool:
        return not {t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)} - before

    wait_for(ended, "the threads past keep to end")


def test_other_scopes_go_to_the_app_untouched():
    got: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        got.append(scope)

    kept = KeptThreads(app)
    asyncio.run(kept({"type": "lifespan"}, None, None))
    assert got == [{"type": "lifespan"}] and kept.waiting() == 0


@pytest.mark.parametrize("keep", [-1, 1.5, True, "8", None])
def test_keep_must_be_a_whole_number_of_threads(keep):
    with pytest.raises(ValueError, match="keep must be a whole number"):
        KeptThreads(get_asgi_application(), keep=keep)


def test_the_asgi_wrappers_and_their_types_live_in_one_module():
    """``django_pdfpool.asgi`` is one module: the three wrappers and the ASGI types they
    speak, each type assigned there and nowhere else in the glue."""
    import ast
    from pathlib import Path

    import django_pdfpool
    from django_pdfpool import asgi

    package = Path(django_pdfpool.__file__).parent
    assert Path(asgi.__file__) == package / "asgi.py" and not (package / "asgi").exists()
    for name in ("PdfPoolDoor", "PoolLifespan", "KeptThreads"):
        assert getattr(asgi, name).__module__ == "django_pdfpool.asgi"
        assert getattr(django_pdfpool, name) is getattr(asgi, name)
    declared: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] in {"admission", "sandbox"}:
            continue  # the layers below know no ASGI (admission's Scope is another concept)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id in ASGI_TYPES:
                        declared.setdefault(target.id, []).append(path.name)
    assert declared == {name: ["asgi.py"] for name in ASGI_TYPES}


ASGI_TYPES = {"Scope", "Message", "Receive", "Send", "ASGIApp"}


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_the_door_lets_django_answer_a_host_it_does_not_serve(pdfpool, settings, door):
    """CommonMiddleware's 400, not the door's 413 for a size over the limit."""
    from django_pdfpool import PdfPoolDoor

    settings.ALLOWED_HOSTS = ["testserver"]
    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door)
    request = asgi_post("/sync/", b"%PDF-" + b"x" * 2000, host=b"evil.example")
    door = PdfPoolDoor(get_asgi_application())
    assert asyncio.run(answer_of(door, request, b"%PDF-" + b"x" * 2000))[0] == 400


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_the_door_lets_django_answer_a_query_string_that_is_not_utf8(pdfpool, door):
    """Django's handler answers 400 for it; the door, unable to read the request, steps aside."""
    from django_pdfpool import PdfPoolDoor

    pdfpool(DOOR=door)
    request = asgi_post("/sync/", b"%PDF- 1234", query=b"\xff")
    door = PdfPoolDoor(get_asgi_application())
    assert asyncio.run(answer_of(door, request, b"%PDF- 1234"))[0] == 400


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_the_doors_refusal_is_answered_through_the_projects_middleware(
    pdfpool, settings, caplog, door
):
    """Their headers and Django's response log, as on the view's own refusal: a browser on
    another origin can read the 413 (the door answered before the middleware once)."""
    from django_pdfpool import PdfPoolDoor

    settings.MIDDLEWARE = [
        "django.middleware.security.SecurityMiddleware",
        "tests.project.views.AllowOrigin",
        *settings.MIDDLEWARE,
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ]
    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door)
    request, body = oversized()
    with caplog.at_level(logging.WARNING, logger="django.request"):
        door = PdfPoolDoor(get_asgi_application())
        status, _, sent = asyncio.run(answer_of(door, request, body))
    headers = {name.decode(): value.decode() for name, value in sent.items()}
    logged = [r.getMessage() for r in caplog.records if r.name == "django.request"]
    assert status == 413 and headers.pop("Connection", "close") == "close"
    assert headers == {
        "Content-Type": "application/json", "Content-Length": headers["Content-Length"],
        "Vary": "Accept", "Access-Control-Allow-Origin": "https://app.example",
        "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin", "Cross-Origin-Opener-Policy": "same-origin",
    }  # fmt: skip
    assert logged == ["Request Entity Too Large: /sync/"]  # Django logs each 4xx and 5xx


class StreamingMaintenance:
    """A project's maintenance middleware that answers every request with a stream."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> StreamingHttpResponse:
        async def page() -> AsyncIterator[bytes]:
            yield b"down for "
            yield b"maintenance"

        return StreamingHttpResponse(page(), status=503)


def template_refusal(request: Any, exception: Any) -> TemplateResponse:
    """A project's REFUSAL_VIEW rendering a template, as views do (Django renders it)."""
    page = engines["django"].from_string("refused: {{ code }}")
    return TemplateResponse(request, page, {"code": exception.code}, status=exception.status)


def oversized(root_path: str = "") -> tuple[dict[str, Any], bytes]:
    """A raw PDF upload to /sync/ over a MAX_UPLOAD_SIZE of 1024 bytes, and its body."""
    body = b"%PDF-" + b"x" * 2000
    return asgi_post("/sync/", body, root_path=root_path), body


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_refusal_is_answered_as_djangos_handler_answers_a_views(pdfpool, settings, door):
    """A middleware's streamed answer is streamed (and the linger's last message comes after
    it), a REFUSAL_VIEW's template response is rendered."""
    from django_pdfpool import PdfPoolDoor

    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door, REFUSAL_VIEW="tests.test_asgi.template_refusal")
    request, body = oversized()
    answer = asyncio.run(answer_of(PdfPoolDoor(get_asgi_application()), request, body))
    assert answer[:2] == (413, b"refused: too_large")
    settings.MIDDLEWARE = ["tests.test_asgi.StreamingMaintenance", *settings.MIDDLEWARE]
    down = asyncio.run(answer_of(PdfPoolDoor(get_asgi_application()), request, body))
    assert down[:2] == (503, b"down for maintenance")


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_the_login_redirect_is_under_the_script_prefix(pdfpool, settings, door):
    """A ``LOGIN_URL`` named, not written: reversed under the application's mount point (the
    ASGI ``root_path``), as Django's handler sets it before any middleware runs."""
    from django_pdfpool import PdfPoolDoor

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOGIN_REQUIRED]
    settings.LOGIN_URL = "admin:login"
    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door)
    request, body = oversized(root_path="/app")
    request["query_string"] = b"a=1"
    door = PdfPoolDoor(get_asgi_application())
    status, _, headers = asyncio.run(answer_of(door, request, body))
    assert (status, headers[b"Location"]) == (302, b"/app/admin/login/?next=/app/sync/%3Fa%3D1")


LOGIN_REQUIRED = "django.contrib.auth.middleware.LoginRequiredMiddleware"


LOCALE = "django.middleware.locale.LocaleMiddleware"
urlpatterns = i18n_patterns(route("sync/", sync_extract))  # ROOT_URLCONF for the test below


@pytest.mark.parametrize("language", ["en", "fr"])
def test_the_door_finds_a_pooled_view_under_each_languages_prefix(pdfpool, settings, language):
    """``i18n_patterns`` resolve under the language of the path, which LocaleMiddleware
    activates: the door answers an upload to /fr/ from its headers as to /en/."""
    from django_pdfpool import PdfPoolDoor

    settings.ROOT_URLCONF, settings.LANGUAGE_CODE = "tests.test_asgi", "en"
    settings.MIDDLEWARE = [settings.MIDDLEWARE[0], LOCALE, *settings.MIDDLEWARE[1:]]
    pdfpool(MAX_UPLOAD_SIZE=1024)
    request, _ = oversized()
    request["path"] = f"/{language}/sync/"

    async def post() -> int:  # no body byte sent: Django's handler would wait for them
        talk = ApplicationCommunicator(PdfPoolDoor(get_asgi_application()), request)
        await talk.send_input({"type": "http.request", "body": b"", "more_body": True})
        status = int((await talk.receive_output(DEADLINE))["status"])
        talk.future.cancel()
        return status

    assert asyncio.run(post()) == 413
