"""@pdf_pooled and AdmissionMiddleware through Django's test clients (WSGI path and
AsyncClient): sync and async views, function and class-based, with real extraction
in child processes and with held jobs to pin the pool's rules."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import io
import json
import os
import subprocess
import sys

import pytest
from django.conf import global_settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient, Client, RequestFactory
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from django_pdfpool import decorators, get_pool, pdf_pooled
from django_pdfpool.callers import user_or_forwarded_ip, user_or_ip
from django_pdfpool.checks import check_settings
from django_pdfpool.conf import get_settings
from django_pdfpool.record import format_digest
from tests.conftest import held_requests, until, wait_until
from tests.project.views import HELD, PARSED, VIEW_RUNS, _describe
from tests.support import pdfs

JSON = {"HTTP_ACCEPT": "application/json"}
SOON = 30  # seconds: an answer that should come at once, bounded so a regression fails


def upload(data: bytes, name: str = "doc.pdf") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/pdf")


def post(url: str, data: bytes, ip: str = "10.0.0.1", field: str = "file", **extra):
    return Client(REMOTE_ADDR=ip).post(url, {field: upload(data)}, **JSON, **extra)


def apost(url: str, data: bytes, ip: str = "10.0.0.1", field: str = "file"):
    client = AddressedAsyncClient(ip)
    return client.post(url, {field: upload(data)}, headers={"accept": "application/json"})


class AddressedAsyncClient(AsyncClient):
    """An AsyncClient whose requests come from ``address`` (the ASGI scope's client):
    Django's AsyncClient turns extra keywords into headers, so this is the one way in."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def _base_scope(self, **request):
        scope = super()._base_scope(**request)
        scope["client"] = [self.address, 40000]
        return scope


def held_key(data: bytes) -> str:
    return f"tests.project.views.held_job:{hashlib.sha256(data).hexdigest()}"


def leftovers(pdfpool_settings: dict) -> list[str]:
    import os

    from django.conf import settings

    return os.listdir(settings.FILE_UPLOAD_TEMP_DIR)


# --- pass-through and delivery ----------------------------------------------


@pytest.mark.parametrize("url", ["/sync/", "/async/", "/cbv/sync/", "/cbv/async/"])
def test_get_passes_straight_through(pdfpool, url):
    response = Client().get(url)
    assert response.status_code == 200
    assert response.json() == {"pdf": None}
    assert get_pool().snapshot().counters.started == 0


@pytest.mark.parametrize(
    ("url", "field"),
    [("/sync/", "file"), ("/async/", "document"), ("/cbv/sync/", "file"), ("/cbv/async/", "file")],
)
@pytest.mark.parametrize("client", ["wsgi", "asgi"])
def test_the_view_gets_the_extraction(pdfpool, url, field, client):
    data = pdfs.simple(["first page", "second page"], title="Two pages")
    if client == "wsgi":
        response = post(url, data, field=field)
    else:
        response = asyncio.run(apost(url, data, field=field))
    assert response.status_code == 200, response.content
    pdf = response.json()["pdf"]
    assert pdf["page_count"] == 2
    assert "first page" in pdf["pages"][0] and "second page" in pdf["pages"][1]
    assert pdf["sha256"] == hashlib.sha256(data).hexdigest()
    assert pdf["metadata"].get("/Title") == "Two pages" or "Two pages" in str(pdf["metadata"])
    assert leftovers(pdfpool()) == []


# --- single-flight -------------------------------------------------------------


def test_concurrent_identical_uploads_share_one_run(pdfpool):
    """With every place taken, identical uploads that declare their digest pass the door
    (docs/door.md) and join the one job."""
    pdfpool(SLOTS=1, QUEUE=0)
    HELD.reset(extract=True)
    data = pdfs.simple(["shared"])
    declared = {"HTTP_PDF_DIGEST": format_digest(hashlib.sha256(data).hexdigest())}
    with held_requests(6) as threads:
        futures = [
            threads.submit(post, "/held/sync/", data, f"10.0.0.{i}", **declared) for i in range(6)
        ]
        wait_until(lambda: get_pool().waiting(held_key(data)) == 5)
        HELD.release.set()
        responses = [future.result(timeout=SOON) for future in futures]
    assert [r.status_code for r in responses] == [200] * 6
    assert {r.json()["pdf"]["text"] for r in responses} == {responses[0].json()["pdf"]["text"]}
    assert "shared" in responses[0].json()["pdf"]["text"]
    assert len(HELD.runs) == 1  # one job, so one child process
    assert leftovers(pdfpool()) == []


def test_concurrent_identical_async_uploads_share_one_run(pdfpool):
    data = pdfs.simple(["shared async"])

    async def scenario():
        tasks = [asyncio.create_task(apost("/held/async/", data, f"10.0.1.{i}")) for i in range(4)]
        try:
            await until(lambda: get_pool().waiting(held_key(data)) == 3)
        finally:
            HELD.release.set()
        return await asyncio.gather(*tasks)

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * 4
    assert len(HELD.runs) == 1
    assert leftovers(pdfpool()) == []


def test_the_job_runs_under_the_running_views_key_whatever_the_record_says(pdfpool):
    """The door's record may carry the key of another pooled view (its URL resolution is
    not the handler's): the running view's key is the job's, never the record's."""
    from django_pdfpool.record import RECORD, AdmissionRecord, UploadHeaders

    data = b"%PDF- keyed"
    elsewhere = f"another.view_job:{hashlib.sha256(data).hexdigest()}"
    record = AdmissionRecord(UploadHeaders(None, False, False, None), key=elsewhere)
    with held_requests(1) as threads:
        answer = threads.submit(post, "/held/sync/", data, "10.0.3.1", **{RECORD: record})
        wait_until(lambda: get_pool().running() == 1)
        assert get_pool().pressure(held_key(data)).in_flight
        assert not get_pool().pressure(elsewhere).in_flight
        HELD.release.set()
        assert answer.result(timeout=SOON).status_code == 200


# --- one job per caller, queue, wait -----------------------------------------


def test_a_caller_with_a_job_in_flight_gets_429_at_once(pdfpool):
    with held_requests(3) as threads:
        first = threads.submit(post, "/held/sync/", b"%PDF- first", "10.0.0.9")
        wait_until(lambda: get_pool().running() == 1)
        refused = threads.submit(post, "/held/sync/", b"%PDF- second", "10.0.0.9")
        refused = refused.result(timeout=SOON)
        other_caller = threads.submit(post, "/held/sync/", b"%PDF- second", "10.0.0.8")
        wait_until(lambda: get_pool().running() == 2)
        HELD.release.set()
        assert first.result(timeout=SOON).status_code == 200
        assert other_caller.result(timeout=SOON).status_code == 200
    assert refused.status_code == 429
    assert refused.json()["error"] == "caller_busy"
    assert int(refused["Retry-After"]) >= 1
    assert leftovers(pdfpool()) == []


def test_a_full_queue_gets_503_with_retry_after(pdfpool):
    pdfpool(SLOTS=1, QUEUE=1)
    with held_requests(3) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- a", "10.0.0.1")
        wait_until(lambda: get_pool().running() == 1)
        queued = threads.submit(post, "/held/sync/", b"%PDF- b", "10.0.0.2")
        wait_until(lambda: get_pool().queued() == 1)
        refused = threads.submit(post, "/held/sync/", b"%PDF- c", "10.0.0.3")
        refused = refused.result(timeout=SOON)
        HELD.release.set()
        assert running.result(timeout=SOON).status_code == 200
        assert queued.result(timeout=SOON).status_code == 200
    assert refused.status_code == 503
    assert refused.json() == {
        "error": "busy",
        "message": refused.json()["message"],
        "retry_after": int(refused["Retry-After"]),
    }
    assert int(refused["Retry-After"]) >= 1
    assert leftovers(pdfpool()) == []


def test_waiting_longer_than_wait_gets_503(pdfpool):
    pdfpool(SLOTS=1, QUEUE=1, WAIT=0.2)
    with held_requests(2) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- a", "10.0.0.1")
        wait_until(lambda: get_pool().running() == 1)
        expired = threads.submit(post, "/held/sync/", b"%PDF- b", "10.0.0.2")
        expired = expired.result(timeout=SOON)
        HELD.release.set()
        assert running.result(timeout=SOON).status_code == 200
    assert expired.status_code == 503
    assert expired.json()["error"] == "busy"
    assert "waited" in expired.json()["message"]
    assert HELD.runs == [hashlib.sha256(b"%PDF- a").hexdigest()]
    assert leftovers(pdfpool()) == []


# --- the job's life is not the caller's -----------------------------------------


def test_a_starter_that_disconnects_does_not_take_the_file_from_its_sharers(pdfpool):
    HELD.reset(extract=True)
    data = pdfs.simple(["survives its starter"])

    async def scenario():
        try:
            starter = asyncio.create_task(apost("/held/async/", data, "10.0.2.1"))
            await until(lambda: get_pool().running() == 1)
            sharer = asyncio.create_task(apost("/held/async/", data, "10.0.2.2"))
            await until(lambda: get_pool().waiting(held_key(data)) == 1)
            starter.cancel()  # what ASGI does to the view when its client goes away
            with pytest.raises(asyncio.CancelledError):
                await starter
            assert get_pool().running() == 1
        finally:
            HELD.release.set()
        return await sharer

    response = asyncio.run(scenario())
    assert response.status_code == 200
    assert "survives its starter" in response.json()["pdf"]["text"]
    assert len(HELD.runs) == 1
    wait_until(lambda: leftovers(pdfpool()) == [])


@pytest.mark.parametrize("url", ["/held/async/", "/held/sync/"])  # a sync view: in a thread
def test_a_queued_starter_that_leaves_alone_frees_its_place_and_file(pdfpool, url):
    pdfpool(SLOTS=1, QUEUE=1)

    async def scenario():
        try:
            running = asyncio.create_task(apost("/held/async/", b"%PDF- a", "10.0.3.1"))
            await until(lambda: get_pool().running() == 1)
            queued = asyncio.create_task(apost(url, b"%PDF- b", "10.0.3.2"))
            await until(lambda: get_pool().queued() == 1)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            assert get_pool().queued() == 0
            assert len(leftovers(pdfpool())) == 1  # only the running job's copy
        finally:
            HELD.release.set()
        return await running

    assert asyncio.run(scenario()).status_code == 200
    assert len(HELD.runs) == 1
    assert leftovers(pdfpool()) == []


# --- callers -----------------------------------------------------------------


def test_anonymous_callers_are_told_apart_by_address_only():
    factory = RequestFactory()
    request = factory.post("/", REMOTE_ADDR="192.0.2.7", HTTP_X_FORWARDED_FOR="198.51.100.1")
    from django.contrib.auth.models import AnonymousUser

    request.user = AnonymousUser()
    assert user_or_ip(request) == "ip:192.0.2.7"  # forwarded headers are not trusted
    assert user_or_forwarded_ip(request) == "ip:198.51.100.1"


@pytest.mark.django_db
def test_an_authenticated_user_is_one_caller_whatever_its_address(pdfpool, django_user_model):
    user = django_user_model.objects.create_user("ann", password="x")
    request = RequestFactory().post("/")
    request.user = user
    assert user_or_ip(request) == f"user:{user.pk}"
    client = Client(REMOTE_ADDR="10.0.4.1")
    client.force_login(user)
    HELD.release.set()
    response = client.post("/held/sync/", {"file": upload(b"%PDF- mine")}, **JSON)
    assert response.status_code == 200
    assert get_pool().snapshot().counters.started == 1


# --- bad uploads ---------------------------------------------------------------


@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_a_post_without_the_upload_gets_400(pdfpool, url):
    response = Client().post(url, {"other": "x"}, **JSON)
    assert response.status_code == 400
    assert response.json()["error"] == "no_upload"
    html = Client().post(url, {"other": "x"}, HTTP_ACCEPT="text/html")
    assert html.status_code == 400
    assert html["Content-Type"].startswith("text/html")
    assert b"No PDF received" in html.content and b"application/pdf" in html.content


@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_an_empty_pdf_body_is_no_upload_and_runs_no_job(pdfpool, url):
    """Content-Length: 0 is no content (RFC 9110 8.6), not an empty PDF to extract."""
    empty = {"CONTENT_TYPE": "application/pdf", "CONTENT_LENGTH": "0"}  # as the client omits it
    response = Client().post(url, b"", content_type="application/pdf", **JSON, **empty)
    assert response.status_code == 400
    assert response.json()["error"] == "no_upload"
    assert get_pool().snapshot().counters.started == 0
    assert leftovers(pdfpool()) == []


@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_a_pdf_body_sent_chunked_to_a_wsgi_server_is_411(pdfpool, url):
    """Django reads no chunked body under WSGI (no Content-Length: an empty stream): the
    client is told to send a length, not that it sent nothing."""
    data = pdfs.simple(["chunked"])
    chunked = {"wsgi.input": io.BytesIO(data), "HTTP_TRANSFER_ENCODING": "chunked"}
    response = Client().generic("POST", url, CONTENT_TYPE="application/pdf", **JSON, **chunked)
    assert response.status_code == 411 and response.json()["error"] == "length_required"
    assert "Content-Length" in response.json()["message"]
    assert get_pool().snapshot().counters.started == 0
    assert leftovers(pdfpool()) == []


@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_a_pdf_body_cut_short_runs_no_job(pdfpool, url):
    """Under WSGI a client that leaves mid-body leaves the view a short body (under ASGI
    Django aborts the request): no job for a PDF it never finished sending."""
    data = pdfs.simple(["cut short"])
    cut = {"wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data) + 5000)}
    response = Client().generic("POST", url, CONTENT_TYPE="application/pdf", **JSON, **cut)
    assert response.status_code == 400 and response.json()["error"] == "no_upload"
    assert get_pool().snapshot().counters.started == 0
    assert leftovers(pdfpool()) == []


@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_an_oversized_upload_gets_413_before_any_work(pdfpool, url):
    pdfpool(MAX_UPLOAD_SIZE=1000)
    field = "document" if url == "/async/" else "file"
    response = post(url, b"%PDF-" + b"x" * 5000, field=field)
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
    assert get_pool().snapshot().counters.started == 0
    big = post(url, b"%PDF-" + b"x" * 500_000, field=field)  # refused from the header alone
    assert big.status_code == 413
    assert leftovers(pdfpool()) == []


@pytest.mark.parametrize("client", ["wsgi", "asgi"])
@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_an_upload_declared_too_large_is_refused_before_django_parses_it(
    pdfpool, settings, url, client
):
    """The declared Content-Length alone answers 413: Django never parses the body nor
    stores its file (no upload handler runs). The later size check, for an upload that
    declared a small enough body, answers 413 too, but only once the body was parsed."""
    pdfpool(MAX_UPLOAD_SIZE=1000)
    recording = "tests.project.views.RecordingUploadHandler"
    settings.FILE_UPLOAD_HANDLERS = [recording, *global_settings.FILE_UPLOAD_HANDLERS]
    field = "document" if url == "/async/" else "file"

    def send(data: bytes):
        if client == "wsgi":
            return post(url, data, field=field)
        return asyncio.run(apost(url, data, field=field))

    PARSED.clear()
    parsed = send(b"%PDF-" + b"x" * 5000)  # within the multipart slack: parsed, then refused
    assert parsed.status_code == 413
    assert list(PARSED) == [url]  # the recording handler sees a parse when there is one
    PARSED.clear()
    big = send(b"%PDF-" + b"x" * 500_000)
    assert big.status_code == 413 and big.json()["error"] == "too_large"
    assert list(PARSED) == []  # refused from the header: the body was never parsed or stored
    assert get_pool().snapshot().counters.started == 0
    assert leftovers(pdfpool()) == []


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_view_never_runs_for_an_upload_the_pool_refused_or_could_not_read(pdfpool, kind):
    """503, 429 and 422 are the decorator's own answers: a view (and whatever it does
    besides answering) runs only for an upload whose job gave a result. (The door lets
    these undeclared uploads in within its budget: the pool itself refuses.)"""
    pdfpool(SLOTS=1, QUEUE=0)
    VIEW_RUNS.clear()
    url = f"/counted/{kind}/"
    with held_requests(3) as threads:
        held = threads.submit(post, url, b"%PDF- held", "10.0.10.1")
        wait_until(lambda: get_pool().running() == 1)
        busy = threads.submit(post, url, b"%PDF- another", "10.0.10.2").result(SOON)
        mine = threads.submit(post, url, b"%PDF- mine too", "10.0.10.1").result(SOON)
        HELD.release.set()
        assert held.result(timeout=SOON).status_code == 200
    assert (busy.status_code, busy.json()["error"]) == (503, "busy")
    assert (mine.status_code, mine.json()["error"]) == (429, "caller_busy")
    field = "document" if kind == "async" else "file"
    unreadable = post(f"/counted/extract/{kind}/", pdfs.html(), "10.0.10.3", field=field)
    assert (unreadable.status_code, unreadable.json()["error"]) == (422, "not_a_pdf")
    assert list(VIEW_RUNS) == [url]  # the held upload's run, and no other


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (pdfs.html(), "not_a_pdf"),
        (b"", "not_a_pdf"),
        (pdfs.cyclic_kids(), "malformed"),
        (pdfs.truncated(pdfs.simple(["x" * 50] * 3), "first"), "malformed"),
    ],
    ids=["html", "empty", "cyclic-kids", "truncated"],
)
def test_a_hostile_pdf_gets_422_and_leaves_nothing(pdfpool, data, code):
    import psutil

    before = set(psutil.Process().children(recursive=True))  # an idle template, say
    response = post("/sync/", data)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == code
    assert "Traceback" not in body["message"] and "/" not in body["message"]
    assert leftovers(pdfpool()) == []
    # the child answers before it has exited; it is reaped right after
    wait_until(lambda: set(psutil.Process().children(recursive=True)) <= before, timeout=5)


def test_no_child_that_can_start_is_503_and_logged_as_the_servers_fault(pdfpool, caplog):
    """Not a 422 that blames the PDF: the host cannot run extractions (here its Python exits
    at once), so the client is told to try again and the log says why, at ERROR."""
    from django_pdfpool import sandbox

    def faults_logged():
        return [r for r in caplog.records if r.levelname == "ERROR" and r.exc_info]

    sandbox.configure(python="/bin/false", warm=False)
    try:
        with caplog.at_level("ERROR", "django_pdfpool"):
            response = post("/sync/", pdfs.simple(["no child"]))
            wait_until(faults_logged, timeout=5)  # the job loop logs once it has answered
    finally:
        sandbox.configure(python=sys.executable, warm=False)
    assert (response.status_code, response.json()["error"]) == (503, "runner_lost")
    assert int(response["Retry-After"]) >= 1
    assert "no extraction child could take the job" in caplog.text
    assert leftovers(pdfpool()) == []


# --- settings -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "check_id"),
    [
        ([], "django_pdfpool.E001"),
        ({"SLOTZ": 2}, "django_pdfpool.E002"),
        ({"SLOTS": 0}, "django_pdfpool.E003"),
        ({"SLOTS": "2"}, "django_pdfpool.E003"),
        ({"WAIT": -1}, "django_pdfpool.E003"),
        ({"WAIT": float("nan")}, "django_pdfpool.E003"),
        ({"MEMORY_LIMIT": 1024}, "django_pdfpool.E003"),
        ({"QUEUE": True}, "django_pdfpool.E003"),
        ({"CALLER": "no.such.module.fn"}, "django_pdfpool.E004"),
    ],
)
def test_bad_settings_fire_checks_and_refuse_to_build(settings, value, check_id):
    settings.PDFPOOL = value
    assert check_id in [error.id for error in check_settings()]
    with pytest.raises(ImproperlyConfigured, match=check_id):
        get_settings()


def test_good_settings_pass_the_checks(settings):
    settings.PDFPOOL = {"SLOTS": 3, "WAIT": None, "MAX_PAGES": 10}
    assert check_settings() == []
    assert (get_settings().slots, get_settings().wait, get_settings().queue) == (3, None, 4)


def test_changed_settings_rebuild_the_pool_once_it_is_idle(pdfpool):
    pdfpool(SLOTS=1)
    first = get_pool()
    assert first.slots == 1
    with held_requests(1) as threads:
        held = threads.submit(post, "/held/sync/", b"%PDF- held", "10.0.5.1")
        wait_until(lambda: first.running() == 1)
        pdfpool(SLOTS=3)
        assert get_pool() is first  # busy: jobs keep the limits they were admitted under
        HELD.release.set()
        assert held.result(timeout=SOON).status_code == 200
    wait_until(lambda: first.running() == 0)
    rebuilt = get_pool()
    assert rebuilt is not first and rebuilt.slots == 3
    assert get_pool() is rebuilt


# --- the admission middleware ---------------------------------------------------


@pytest.mark.parametrize("url", ["/direct/sync/", "/direct/async/"])
def test_the_middleware_answers_refusals_from_views_calling_the_pool(pdfpool, url):
    pdfpool(SLOTS=1, QUEUE=0)
    assert Client().get(url, {"key": "free"}, **JSON).json() == {"result": "ran"}
    with held_requests(2) as threads:
        held = threads.submit(post, "/held/sync/", b"%PDF- hold", "10.0.6.1")
        wait_until(lambda: get_pool().running() == 1)
        busy = threads.submit(Client().get, url, {"key": "other"}, **JSON).result(SOON)
        html = threads.submit(Client().get, url, {"key": "other"}, HTTP_ACCEPT="text/html")
        html = html.result(SOON)
        HELD.release.set()
        assert held.result(timeout=SOON).status_code == 200
    assert busy.status_code == 503
    assert busy.json()["error"] == "busy"
    assert int(busy["Retry-After"]) >= 1
    assert html.status_code == 503 and b"Busy" in html.content


@pytest.mark.parametrize("url", ["/direct/sync/", "/direct/async/"])
def test_the_middleware_answers_extraction_errors_from_views_calling_the_pool(pdfpool, url):
    query = {"key": "unreadable", "job": "unreadable"}
    response = Client().get(url, query, **JSON)
    assert response.status_code == 422
    assert response.json()["error"] == "malformed"
    html = Client().get(url, query, HTTP_ACCEPT="text/html")
    assert html.status_code == 422 and html["Content-Type"].startswith("text/html")


def test_the_middleware_leaves_other_requests_alone(pdfpool):
    response = Client().get("/plain/")
    assert response.status_code == 200 and json.loads(response.content) == {"plain": True}
    assert "Retry-After" not in response


# --- answers --------------------------------------------------------------------


def test_json_answer_answers_json_even_to_browsers(pdfpool):
    response = Client().post("/json-only/", {"other": "x"}, HTTP_ACCEPT="text/html")
    assert response.status_code == 400
    assert response.json()["error"] == "no_upload"
    bad = Client().post("/json-only/", {"file": upload(pdfs.html())}, HTTP_ACCEPT="text/html")
    assert bad.status_code == 422 and bad.json()["error"] == "not_a_pdf"


def test_a_views_own_answer_function_makes_every_refusal(pdfpool):
    missing = Client().post("/own-answers/", {"other": "x"})
    assert (missing.status_code, missing.json()["mine"]) == (418, "no_upload")
    with held_requests(2) as threads:
        held = threads.submit(post, "/held/sync/", b"%PDF- mine", "10.0.7.1")
        wait_until(lambda: get_pool().running() == 1)
        refused = threads.submit(post, "/own-answers/", b"%PDF- again", "10.0.7.1").result(SOON)
        HELD.release.set()
        assert held.result(timeout=SOON).status_code == 200
    assert refused.status_code == 418
    assert refused.json()["mine"] == "caller_busy" and refused.json()["status"] == 429
    assert refused.json()["retry"] >= 0


def page_job(pages: str):
    """A factory: every job it makes has the same ``__qualname__``."""

    async def job(upload):
        while pages == "first" and not HELD.release.is_set():
            await asyncio.sleep(0.005)
        return {"pages": pages, "sha256": upload.sha256}

    return job


def _named(pages: str):
    try:
        return pdf_pooled(job=page_job(pages), job_name=f"tests.{pages}_pages")(_describe)
    except TypeError:  # a decorator without job_name: the test below fails on it
        return pdf_pooled(job=page_job(pages))(_describe)


async def _digest_job(upload):
    return {"sha256": upload.sha256}


@method_decorator(pdf_pooled(job=_digest_job), name="dispatch")
class AsyncDispatchView(View):
    async def get(self, request):
        return _describe(request)

    async def post(self, request):
        return _describe(request)


@method_decorator(pdf_pooled(job=_digest_job), name="dispatch")
class SyncDispatchView(View):
    def get(self, request):
        return _describe(request)

    def post(self, request):
        return _describe(request)


@login_required
@pdf_pooled(job=_digest_job)
def login_above(request):
    return _describe(request)


@pdf_pooled(job=_digest_job)
@login_required
def login_below(request):
    return _describe(request)


urlpatterns = [
    path("first/", _named("first")),
    path("all/", _named("all")),
    path("dispatch/async/", AsyncDispatchView.as_view()),
    path("dispatch/sync/", SyncDispatchView.as_view()),
    path("login/above/", login_above),
    path("login/below/", login_below),
]


@pytest.mark.urls("tests.test_decorators")
def test_a_check_above_the_decorator_refuses_before_the_pool_and_below_it_after(pdfpool):
    """docs/usage.md: ``login_required`` above ``@pdf_pooled`` turns an anonymous upload away
    with no job; below it, the upload is extracted first (a job for someone turned away)."""
    assert post("/login/above/", b"%PDF- anonymous").status_code == 302
    assert get_pool().snapshot().counters.started == 0
    assert post("/login/below/", b"%PDF- anonymous").status_code == 302
    assert get_pool().snapshot().counters.started == 1


@pytest.mark.urls("tests.test_decorators")
@pytest.mark.parametrize("url", ["/dispatch/sync/", "/dispatch/async/"])
@pytest.mark.parametrize("client", ["wsgi", "asgi"])
def test_method_decorator_on_dispatch_pools_the_post_of_sync_and_async_views(pdfpool, url, client):
    """Django's idiom for class-based views; an async view's dispatch is a sync method that
    returns its handler's coroutine, on the event loop under ASGI."""
    data = b"%PDF- through dispatch"
    response = post(url, data) if client == "wsgi" else asyncio.run(apost(url, data))
    assert response.status_code == 200, response.content
    assert response.json() == {"pdf": {"sha256": hashlib.sha256(data).hexdigest()}}
    assert Client().get(url).json() == {"pdf": None}


class _CallableJob:
    async def __call__(self, upload):
        return None

    async def method(self, upload):
        return None


async def _module_job(upload):
    return None


AMBIGUOUS = {
    "lambda": lambda upload: None,
    "closure": page_job("first"),
    "partial": functools.partial(_module_job),
    "callable object": _CallableJob(),
    "bound method": _CallableJob().method,
}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("kind", AMBIGUOUS)
def test_an_ambiguous_job_without_a_name_is_refused_when_the_view_is_decorated(kind):
    with pytest.raises(ImproperlyConfigured, match="job_name="):
        pdf_pooled(job=AMBIGUOUS[kind])(_describe)
    with pytest.raises(ImproperlyConfigured, match="job_name="):
        pdf_pooled(_describe, job=AMBIGUOUS[kind])


def test_a_class_based_view_decorated_whole_is_told_to_use_method_decorator():
    """Not told it is a DRF view (the class check once named DRF for every class)."""
    with pytest.raises(ImproperlyConfigured, match="method_decorator") as told:
        pdf_pooled(SyncDispatchView)
    assert "DRF" not in str(told.value)


def test_an_answer_that_is_no_function_is_refused_when_the_view_is_decorated():
    """A dotted path, as REFUSAL_VIEW takes, would fail only at the first refusal."""
    with pytest.raises(ImproperlyConfigured, match="answer= takes a function"):
        pdf_pooled(answer="myapp.views.pdf_refused")(_describe)
    with pytest.raises(ImproperlyConfigured, match="answer= takes a function"):
        pdf_pooled(_describe, answer="myapp.views.pdf_refused")


def test_a_module_function_needs_no_name_and_a_named_job_is_accepted():
    pdf_pooled(job=_module_job)(_describe)
    pdf_pooled(job=AMBIGUOUS["lambda"], job_name="tests.lambda")(_describe)
    with pytest.raises(ImproperlyConfigured):
        pdf_pooled(job=_module_job, job_name="two words")


@pytest.mark.urls("tests.test_decorators")
def test_two_closures_of_one_factory_never_share_a_run(pdfpool):
    data = b"%PDF- one file to two jobs"
    with held_requests(2) as threads:
        first = threads.submit(
            Client(REMOTE_ADDR="10.1.0.1").post, "/first/", {"file": upload(data)}, **JSON
        )
        wait_until(lambda: get_pool().running() == 1)
        every = threads.submit(
            Client(REMOTE_ADDR="10.1.0.2").post, "/all/", {"file": upload(data)}, **JSON
        )
        every = every.result(timeout=10)  # its own job, not waiting for the held one
        HELD.release.set()
        first = first.result(timeout=30)
    assert first.json()["pdf"]["pages"] == "first"
    assert every.json()["pdf"]["pages"] == "all"  # not the first job's result


def test_the_default_jobs_key_holds_the_settings_that_change_its_result(pdfpool, monkeypatch):
    from django_pdfpool.admission.local import Pool

    keys = []
    run = Pool.run

    async def recording_run(self, key, *args, **kwargs):
        keys.append(key)
        return await run(self, key, *args, **kwargs)

    monkeypatch.setattr(Pool, "run", recording_run)
    data = pdfs.simple(["one", "two"])
    variants = [{}, {}, {"MAX_PAGES": 1}, {"ENGINE": "pypdfium2"}, {"MEMORY_LIMIT": 256 << 20}]
    variants += [{"MAX_TEXT_BYTES": 4096}, {"TIMEOUT": 20.0}]
    for extra in variants:
        if extra.get("ENGINE") == "pypdfium2" and not _importable("pypdfium2"):
            continue
        pdfpool(**extra)
        response = Client().post("/sync/", {"file": upload(data)}, **JSON)
        assert response.status_code == 200
    assert keys[0] == keys[1]  # the same settings: the same key
    assert len(set(keys)) == len(keys) - 1  # any result-changing setting: another key
    assert all(len(key) < 120 for key in keys)


def test_the_settings_part_of_the_key_is_the_same_in_every_process(pdfpool):
    digest = "ab" * 32
    code = (
        "import django; django.setup(); from django_pdfpool.decorators import pool_key; "
        f"print(pool_key({digest!r}))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.project.settings", "PYTHONHASHSEED": "7"}
    env["PDFPOOL_JSON"] = json.dumps({"MAX_PAGES": 3})
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert other.returncode == 0, other.stderr
    pdfpool(MAX_PAGES=3)
    assert other.stdout.strip() == decorators.pool_key(digest)
    assert decorators.pool_key(digest).endswith(":" + digest)


def _sync_job(upload):
    return {"sha256": upload.sha256}


def test_a_job_that_returns_no_awaitable_is_a_type_error_naming_it(pdfpool):
    """A plain ``def`` job (no coroutine back) fails the upload with a TypeError that says
    which job and how to mend it, not Python's "can't be used in 'await' expression"."""
    view = pdf_pooled(job=_sync_job)(_describe)
    request = RequestFactory().post(
        "/", pdfs.simple(["x"]), content_type="application/pdf", REMOTE_ADDR="10.9.9.9"
    )
    with pytest.raises(TypeError, match=r"tests\.test_decorators\._sync_job.*async def"):
        view(request)
    assert get_pool().snapshot().running == 0
