"""``django_pdfpool.contrib.ninja`` with the real django-ninja, through Django's test client:
async and sync operations with ``File(...)`` and raw bodies; the caller from
``request.auth``; 401 (or its authentication's 403) before any work; refusals through the
API's exception handlers with ``Retry-After``; the decorator above ``@api.post`` fails at
import."""

from __future__ import annotations

import io
import os
from typing import Annotated

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from ninja import File, NinjaAPI, Schema, UploadedFile
from ninja.errors import HttpError

import django_pdfpool
from django_pdfpool import get_pool
from django_pdfpool.contrib import ninja
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD, held_job
from tests.support import pdfs
from tests.test_decorators import upload

pytestmark = pytest.mark.urls("tests.project.contrib_urls")
SOON = 60


def send(path, data, token="t-alice", raw=False, ip="10.0.8.1"):
    client = Client(REMOTE_ADDR=ip)
    headers = {} if token is None else {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if raw:
        return client.post(f"/ninja/{path}", data, content_type="application/pdf", **headers)
    return client.post(f"/ninja/{path}", {"file": upload(data)}, **headers)


def test_an_async_operation_with_file_and_a_sync_one_with_a_raw_body(pdfpool):
    extracted = send("extract", pdfs.simple(["ninja, async, multipart"]))
    assert extracted.status_code == 200, extracted.content
    assert extracted.json() == {"pdf": {"text": "ninja, async, multipart"}, "auth": "t-alice"}
    raw = send("raw", pdfs.simple(["ninja, sync, raw"]), raw=True)
    assert raw.status_code == 200, raw.content
    assert raw.json()["pdf"] == {"text": "ninja, sync, raw"}
    assert os.listdir(pdfpool.staged) == []


def test_the_caller_is_request_auth(pdfpool):
    """Two tokens behind one address each get a job; one token's second upload is 429
    through the API's handler, with Retry-After."""
    HELD.reset()
    with held_requests(2) as threads:
        first = threads.submit(send, "held", b"%PDF- alice")
        wait_until(lambda: len(HELD.runs) == 1)
        second = threads.submit(send, "held", b"%PDF- bob", "t-bob")
        wait_until(lambda: len(HELD.runs) == 2)
        again = send("held", b"%PDF- alice again")
        assert again.status_code == 429, again.content
        assert int(again["Retry-After"]) >= 1
        assert again.json()["code"] == "caller_busy"
        assert again.json()["handled_by"] == "project"  # api.exception_handler's answer
        callers = {job.caller for job in get_pool().snapshot().jobs}
        assert callers == {
            ninja.auth_caller(_Authed("t-alice")),
            ninja.auth_caller(_Authed("t-bob")),
        }
        assert not any("t-alice" in caller for caller in callers)  # no token on show
        HELD.release.set()
        assert first.result(SOON).status_code == second.result(SOON).status_code == 200


class _Authed:
    def __init__(self, auth):
        self.auth = auth


def test_rows_an_authentication_returns_are_callers_by_their_key_not_their_text(pdfpool):
    """ninja's way: ``authenticate`` returns the row of the key (``Client.objects.get(...)``).
    Two rows whose ``__str__`` is the same (their owner's name, say) are two callers, each
    with a job; the same row again is the same caller (429)."""
    from django.contrib.auth.models import Group
    from django.test import override_settings
    from django.urls import path
    from ninja.security import APIKeyHeader

    class Key(APIKeyHeader):
        param_name = "X-API-Key"

        def authenticate(self, request, key):  # a row, as fetched for each request
            return Group(pk=int(key), name="Acme") if key in ("1", "2") else None

    keyed = NinjaAPI(urls_namespace="pdfpool-rows")

    @keyed.post("/x", auth=Key())
    @ninja.pdf_pooled(job=held_job)
    def x(request):
        return {"ok": True}

    urls = type("urls", (), {"urlpatterns": [path("rows/", keyed.urls)]})

    def send_as(key, data):
        with override_settings(ROOT_URLCONF=urls):
            client = Client(REMOTE_ADDR="10.0.8.30")
            return client.post("/rows/x", data, "application/pdf", HTTP_X_API_KEY=key)

    HELD.reset()
    with held_requests(2) as threads:
        first = threads.submit(send_as, "1", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        second = threads.submit(send_as, "2", b"%PDF- two")
        wait_until(lambda: len(HELD.runs) == 2 or second.done())
        again = send_as("1", b"%PDF- one again")
        assert again.status_code == 429, again.content
        HELD.release.set()
        assert first.result(SOON).status_code == 200
        assert second.result(SOON).status_code == 200, second.result().content
    assert len(HELD.runs) == 2


@pytest.mark.parametrize("passes", [True, AnonymousUser()], ids=["true", "anonymous-user"])
def test_an_authentication_that_returns_true_names_nobody(pdfpool, passes):
    """``True`` says a request may pass, not who sent it, and so does an ``AnonymousUser``
    (ninja's optional authentication): the ``CALLER`` setting names the caller (the address
    here), else every client of the API would be one caller."""
    from django.test import override_settings
    from django.urls import path

    allowed = NinjaAPI(urls_namespace="pdfpool-true-auth")

    @allowed.post("/x", auth=lambda request: passes)
    @ninja.pdf_pooled(job=held_job)
    def x(request):
        return {"ok": True}

    urls = type("urls", (), {"urlpatterns": [path("allowed/", allowed.urls)]})

    def send_from(ip, data):
        with override_settings(ROOT_URLCONF=urls):
            return Client(REMOTE_ADDR=ip).post("/allowed/x", data, "application/pdf")

    HELD.reset()
    with held_requests(2) as threads:
        first = threads.submit(send_from, "10.0.8.21", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        second = threads.submit(send_from, "10.0.8.22", b"%PDF- two")
        wait_until(lambda: len(HELD.runs) == 2 or second.done())
        assert {job.caller for job in get_pool().snapshot().jobs} == {
            "ip:10.0.8.21",
            "ip:10.0.8.22",
        }
        HELD.release.set()
        assert first.result(SOON).status_code == second.result(SOON).status_code == 200


def test_without_ninja_auth_the_caller_setting_names_the_caller(pdfpool):
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "anonymous", b"%PDF- anonymous", None, False, "10.0.8.9")
        wait_until(lambda: len(HELD.runs) == 1)
        assert {job.caller for job in get_pool().snapshot().jobs} == {"ip:10.0.8.9"}


def test_a_request_without_a_token_is_401_before_any_extraction(pdfpool):
    HELD.reset()
    HELD.release.set()
    response = send("held", pdfs.simple(["nobody"]), token=None)
    assert response.status_code == 401
    assert HELD.runs == [] and get_pool().snapshot().counters.started == 0
    assert os.listdir(pdfpool.staged) == []


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_token_the_authentication_refuses_403_gets_ninjas_403_not_the_doors_413(pdfpool, door):
    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door)
    environ = {"wsgi.input": io.BytesIO(), "CONTENT_LENGTH": "100000000"}
    response = Client(REMOTE_ADDR="10.0.8.9").generic(
        "POST", "/ninja/raw", content_type="application/pdf",
        HTTP_AUTHORIZATION="Bearer t-banned", **environ,
    )  # fmt: skip
    assert response.status_code == 403, response.content
    assert response.json() == {"detail": "This token is banned."}


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_any_client_error_the_authentication_raises_is_ninjas_not_the_doors_413(pdfpool, door):
    """An ``HttpError`` an authentication raises from the headers (400 for a malformed key
    here) is ninja's answer, given before the body with the door as without it."""
    from django.test import override_settings
    from django.urls import path
    from ninja.security import APIKeyHeader

    class Key(APIKeyHeader):
        param_name = "X-API-Key"

        def authenticate(self, request, key):
            if not (key or "").startswith("k-"):
                raise HttpError(400, "A key starts with k-.")
            return key

    keyed = NinjaAPI(urls_namespace="pdfpool-malformed-key")

    @keyed.post("/x", auth=Key())
    @ninja.pdf_pooled
    def x(request):
        return {"text": request.pdf.text}

    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door)
    urls = type("urls", (), {"urlpatterns": [path("keyed/", keyed.urls)]})
    environ = {"wsgi.input": io.BytesIO(), "CONTENT_LENGTH": "100000000"}
    with override_settings(ROOT_URLCONF=urls):
        response = Client(REMOTE_ADDR="10.0.8.12").generic(
            "POST", "/keyed/x", content_type="application/pdf", HTTP_X_API_KEY="nope",
            **environ,
        )  # fmt: skip
    assert response.status_code == 400, response.content
    assert response.json() == {"detail": "A key starts with k-."}


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_an_async_authentication_is_asked_before_the_pool_and_names_the_caller(pdfpool, door):
    """``async def authenticate``: with the pool full, a token it refuses is ninja's 401, one it
    accepts the pool's 503; let in, the caller is what it returned."""
    from django.test import override_settings
    from django.urls import path
    from ninja.security import HttpBearer

    class AsyncBearer(HttpBearer):
        async def authenticate(self, request, token):
            return token if token.startswith("t-") else None

    awaited = NinjaAPI(urls_namespace="pdfpool-async-auth")

    @awaited.post("/x", auth=AsyncBearer())
    @ninja.pdf_pooled(job=held_job)
    async def x(request, file: File[UploadedFile]):
        return {"auth": request.auth}

    urls = type("urls", (), {"urlpatterns": [path("awaited/", awaited.urls)]})
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)

    def send_as(token, data):
        with override_settings(ROOT_URLCONF=urls):
            client = Client(REMOTE_ADDR="10.0.8.31")
            return client.post("/awaited/x", {"file": upload(data)}, HTTP_AUTHORIZATION=token)

    HELD.reset()
    with held_requests(1) as threads:
        first = threads.submit(send_as, "Bearer t-first", b"%PDF- first")
        wait_until(lambda: len(HELD.runs) == 1)
        assert {job.caller for job in get_pool().snapshot().jobs} == {
            ninja.auth_caller(_Authed("t-first"))
        }
        refused = send_as("Bearer nope", b"%PDF- second")
        busy = send_as("Bearer t-second", b"%PDF- second")
        again = send_as("Bearer t-first", b"%PDF- first's second")  # the pool's rule 2 first
        HELD.release.set()
        assert first.result(SOON).json() == {"auth": "t-first"}
    assert refused.status_code == 401, refused.content
    assert busy.status_code == 503 and int(busy["Retry-After"]) >= 1, busy.content
    assert again.status_code == 429 and int(again["Retry-After"]) >= 1, again.content


def test_a_body_past_its_deadline_while_ninja_parses_it_is_408_through_the_handlers(pdfpool):
    from tests.test_middleware import trickled_form

    pdfpool(DOOR={"BODY_TIMEOUT": 0.5, "BODY_MIN_RATE": 1000})
    client = Client(raise_request_exception=False, REMOTE_ADDR="10.0.8.10")
    environ = trickled_form({"file": upload(b"%PDF- " + b"x" * 200)})
    response = client.generic("POST", "/ninja/anonymous", **environ)
    assert response.status_code == 408, response.content
    assert response.json()["handled_by"] == "project"


def test_busy_unreadable_and_too_large_through_the_handlers(pdfpool):
    pdfpool(SLOTS=1, QUEUE=0, DOOR=False, MAX_UPLOAD_SIZE=4000)
    unreadable = send("extract", b"not a pdf")
    assert unreadable.status_code == 422 and unreadable.json()["code"] == "not_a_pdf"
    assert "Retry-After" not in unreadable
    too_large = send("raw", b"%PDF-" + b"x" * 8000, raw=True)
    assert too_large.status_code == 413 and too_large.json()["code"] == "too_large"
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "held", b"%PDF- the only slot")
        wait_until(lambda: len(HELD.runs) == 1)
        busy = send("held", b"%PDF- another", "t-erin")
    assert busy.status_code == 503 and busy.json()["code"] == "busy"
    assert int(busy["Retry-After"]) >= 1


def test_the_door_answers_ninja_routes_through_the_apis_handler(pdfpool):
    pdfpool(SLOTS=1, QUEUE=0)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "held", b"%PDF- the only slot")
        wait_until(lambda: len(HELD.runs) == 1)
        busy = send("extract", b"%PDF- another", "t-frank")  # the door sheds it
    assert busy.status_code == 503
    assert busy.json()["handled_by"] == "project" and busy.json()["code"] == "busy"
    assert int(busy["Retry-After"]) >= 1
    assert len(HELD.runs) == 1


def test_the_default_handler_answers_detail_with_retry_after(pdfpool):
    """An API without a handler of its own: ninja's HttpError handler, our Retry-After."""
    from django.urls import path

    bare = NinjaAPI(urls_namespace="pdfpool-bare")

    @bare.post("/x")
    @ninja.pdf_pooled
    def x(request):
        return {"ok": True}

    from django.test import override_settings

    urls = type("urls", (), {"urlpatterns": [path("bare/", bare.urls)]})
    with override_settings(ROOT_URLCONF=urls):
        response = Client().post("/bare/x", {"other": "x"})
    assert response.status_code == 400
    assert response.json() == {"detail": response.json()["detail"]}
    assert "multipart file field" in response.json()["detail"]


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_csrf_exempt_operation_skips_its_cookie_auths_csrf_check_at_the_door_too(pdfpool, door):
    """ninja skips the CSRF check of a cookie authentication on a ``csrf_exempt`` operation:
    the door, asking that authentication from the headers, must too."""
    from django.test import override_settings
    from django.urls import path
    from django.views.decorators.csrf import csrf_exempt
    from ninja.security import APIKeyCookie

    class Key(APIKeyCookie):  # csrf=True: a form or a header token, unless exempt
        param_name = "key"

        def authenticate(self, request, key):
            return key

    exempt = NinjaAPI(urls_namespace="pdfpool-csrf-exempt")

    @exempt.post("/x", auth=Key())
    @csrf_exempt
    @ninja.pdf_pooled
    def x(request):
        return {"text": request.pdf.text}

    pdfpool(DOOR=door)
    urls = type("urls", (), {"urlpatterns": [path("exempt/", exempt.urls)]})
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR="10.0.8.11")
    client.cookies["key"] = "k-1"
    with override_settings(ROOT_URLCONF=urls):
        response = client.post("/exempt/x", pdfs.simple(["exempt"]), "application/pdf")
    assert response.status_code == 200, response.content
    assert response.json() == {"text": "exempt"}


def test_the_decorator_above_api_post_fails_at_import():
    api = NinjaAPI(urls_namespace="pdfpool-misplaced")

    def op(request): ...

    registered = api.post("/op")(op)
    with pytest.raises(ImproperlyConfigured, match=r"below @api\.post"):
        ninja.pdf_pooled(registered)
    with pytest.raises(ImproperlyConfigured, match=r"below @api\.post"):
        django_pdfpool.pdf_pooled(registered)


REFUSALS = {400, 408, 411, 413, 422, 429, 503}


def test_the_openapi_schema_lists_every_refusal_and_the_raw_body():
    """Each pooled operation documents what it may answer besides 200: 401 where it sets
    ``auth``, the answers' statuses, 429 and 503 with ``Retry-After``; an operation
    declaring no body documents the PDF it takes, raw or in a form; ``File`` is ninja's."""
    from tests.project.contrib_views import api

    paths = api.get_openapi_schema(path_prefix="/ninja/")["paths"]
    for path, with_auth in (
        ("/ninja/held", True),
        ("/ninja/raw", True),
        ("/ninja/anonymous", False),
    ):
        responses = paths[path]["post"]["responses"]
        assert set(responses) == {200, *REFUSALS, *([401] if with_auth else [])}, path
        for status in (429, 503):
            header = responses[status]["headers"]["Retry-After"]
            assert header["schema"] == {"type": "integer", "minimum": 1}
        assert "headers" not in responses[413]
    raw = paths["/ninja/raw"]["post"]["requestBody"]
    assert raw["required"] is True
    assert raw["content"]["application/pdf"]["schema"] == {"type": "string", "format": "binary"}
    form = raw["content"]["multipart/form-data"]["schema"]
    assert form["properties"]["file"]["format"] == "binary" and form["required"] == ["file"]
    declared = paths["/ninja/held"]["post"]["requestBody"]["content"]  # File(...): ninja's
    assert list(declared) == ["multipart/form-data"]


def test_the_operations_own_responses_keep_their_words_and_get_retry_after():
    from ninja import Schema

    class Busy(Schema):
        detail: str

    api = NinjaAPI(urls_namespace="pdfpool-declared")

    @api.post("/op", response={200: dict, 503: Busy}, openapi_extra={"tags": ["pdf"]})
    @ninja.pdf_pooled(field="document")
    def op(request):
        return {}

    post = api.get_openapi_schema(path_prefix="/")["paths"]["/op"]["post"]
    assert post["tags"] == ["pdf"]
    busy = post["responses"][503]
    assert busy["description"] != "Busy: please try again shortly"  # the operation's own
    assert "content" in busy and "Retry-After" in busy["headers"]
    form = post["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["document"]


def test_openapi_extra_of_the_operations_own_adds_to_the_refusals_and_the_body():
    """ninja merges an operation's ``openapi_extra`` into its schema key by key: responses
    and a body description of the operation's own keep the refusals and the PDF body."""
    api = NinjaAPI(urls_namespace="pdfpool-extra")
    extra = {"responses": {404: {"description": "No such folder"}},
             "requestBody": {"description": "The report"}}  # fmt: skip

    @api.post("/op", openapi_extra=extra)
    @ninja.pdf_pooled
    def op(request):
        return {}

    post = api.get_openapi_schema(path_prefix="/")["paths"]["/op"]["post"]
    assert set(post["responses"]) == {200, 404, *REFUSALS}
    assert post["responses"][404] == {"description": "No such folder"}
    assert "Retry-After" in post["responses"][503]["headers"]
    body = post["requestBody"]
    assert body["description"] == "The report"
    assert set(body["content"]) == {"application/pdf", "multipart/form-data"}


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_client_the_throttles_refuse_gets_ninjas_429_with_the_pool_full(pdfpool, door):
    """ninja's throttles come before the operation: a client they refuse gets their 429 (their
    Retry-After) whatever the pool says, the door's refusal included."""
    from tests.contrib.test_drf import throttled_and_not

    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)  # refused at the door
    again, fresh = throttled_and_not("/ninja/throttled", lambda body: {"file": upload(body)})
    assert again.status_code == 429 and int(again["Retry-After"]) > 3600, again.content
    assert fresh.status_code == 503 and int(fresh["Retry-After"]) < 3600, fresh.content


def test_a_file_parameter_the_decorator_does_not_read_fails_at_declaration():
    """``document: File[...]`` with the decorator reading the form field ``file``: ninja
    requires ``document`` (422 without it) and the pool ``file`` (400 without it), so every
    upload would fail; the route is refused where it is declared, naming both."""
    api = NinjaAPI(urls_namespace="pdfpool-other-field")
    with pytest.raises(ImproperlyConfigured, match=r"'file'.*'document'.*field='document'"):

        @api.post("/op")
        @ninja.pdf_pooled
        def op(request, document: File[UploadedFile]): ...


def test_a_list_of_files_in_the_field_the_decorator_reads_fails_at_declaration():
    """The pool extracts one PDF: of ``file: File[list[UploadedFile]]`` it would take the last
    and drop the others unread; the route is refused where it is declared."""
    api = NinjaAPI(urls_namespace="pdfpool-file-list")
    with pytest.raises(ImproperlyConfigured, match=r"one PDF.*'file'.*a list"):

        @api.post("/op")
        @ninja.pdf_pooled
        def op(request, file: File[list[UploadedFile]]): ...


class Options(Schema):
    pages: int = 1


def test_a_json_body_parameter_fails_at_declaration():
    """A ``Schema`` parameter without a ``File`` or ``Form`` is ninja's JSON body: a PDF, raw
    or in a form, is ninja's 400 ("Cannot parse request body") every time; refused where the
    route is declared."""
    api = NinjaAPI(urls_namespace="pdfpool-json-body")
    with pytest.raises(ImproperlyConfigured, match=r"'options' as its JSON body"):

        @api.post("/op")
        @ninja.pdf_pooled
        def op(request, options: Options): ...


@pytest.mark.parametrize("declared", ["name", "alias"])
def test_the_file_parameter_the_decorator_reads_is_the_pdf(pdfpool, declared):
    """``field=`` names the ``File`` parameter's form field: its name, or its alias."""
    from django.test import override_settings
    from django.urls import path

    api = NinjaAPI(urls_namespace=f"pdfpool-field-{declared}")
    if declared == "name":

        @api.post("/op")
        @ninja.pdf_pooled(field="document")
        def op(request, document: File[UploadedFile], image: File[UploadedFile] = None):
            return {"text": request.pdf.text, "name": document.name}

    else:

        @api.post("/op")
        @ninja.pdf_pooled(field="document")
        def op(request, doc: Annotated[UploadedFile, File(alias="document")]):
            return {"text": request.pdf.text, "name": doc.name}

    urls = type("urls", (), {"urlpatterns": [path("named/", api.urls)]})
    with override_settings(ROOT_URLCONF=urls):
        sent = {"document": upload(pdfs.simple(["the document"]))}
        response = Client(REMOTE_ADDR="10.0.8.13").post("/named/op", sent)
    assert response.status_code == 200, response.content
    assert response.json() == {"text": "the document", "name": "doc.pdf"}


def test_responses_the_operation_declares_by_string_key_are_merged_not_doubled():
    """OpenAPI writes statuses as strings: an ``openapi_extra`` response ``"503"`` is the
    503 the refusals document (one JSON key, its words and ``Retry-After``), not a second."""
    api = NinjaAPI(urls_namespace="pdfpool-string-statuses")

    @api.post("/op", openapi_extra={"responses": {"503": {"description": "Pool full"}}})
    @ninja.pdf_pooled
    def op(request):
        return {}

    responses = api.get_openapi_schema(path_prefix="/")["paths"]["/op"]["post"]["responses"]
    statuses = [str(status) for status in responses]
    assert sorted(statuses) == sorted(set(statuses)), statuses
    (busy,) = (answer for status, answer in responses.items() if str(status) == "503")
    assert busy["description"] == "Pool full" and "Retry-After" in busy["headers"]


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_request_ninja_refuses_from_its_headers_is_ninjas_422_with_the_pool_full(pdfpool, door):
    """ninja validates the parameters before the operation: a raw body to an operation taking
    a ``File`` (no form, so no file), or a query without its parameter, is its 422 whatever
    the pool says, not a 503 to retry."""
    from django.test import override_settings
    from django.urls import path

    from tests.project import contrib_urls

    queried = NinjaAPI(urls_namespace="pdfpool-queried")

    @queried.post("/x")
    @ninja.pdf_pooled
    def x(request, folder: int):
        return {"folder": folder}

    urls = type("urls", (), {"urlpatterns": [*contrib_urls.urlpatterns, path("q/", queried.urls)]})
    pdfpool(SLOTS=1, QUEUE=0, DOOR=door)
    HELD.reset()
    with override_settings(ROOT_URLCONF=urls), held_requests(1) as threads:
        threads.submit(send, "held", b"%PDF- the only slot")
        wait_until(lambda: len(HELD.runs) == 1)
        no_form = send("extract", pdfs.simple(["no form"]), "t-gina", raw=True)
        no_query = Client().post("/q/x?folder=ten", pdfs.simple(["x"]), "application/pdf")
    for response, where in ((no_form, ["file", "file"]), (no_query, ["query", "folder"])):
        assert response.status_code == 422, response.content
        assert response.json()["detail"][0]["loc"] == where
        assert "Retry-After" not in response


def test_a_refusal_is_raised_through_decorators_between_it_and_api_post(pdfpool):
    """ninja's operations refuse by raising: a decorator between ``@api.post`` and the pool's
    (``@paginate`` here, which pages what the function returns) passes a refusal on to the
    API's handlers, ``Retry-After`` and all, instead of taking it for the result (a 500)."""
    from django.test import override_settings
    from django.urls import path
    from ninja.pagination import paginate

    paged = NinjaAPI(urls_namespace="pdfpool-paged")

    @paged.post("/pages", response=list[str])
    @paginate
    @ninja.pdf_pooled(job=held_job)
    def pages(request, file: File[UploadedFile]):
        return [request.pdf["sha256"]]

    pdfpool(SLOTS=1, QUEUE=0, DOOR=False)
    urls = type("urls", (), {"urlpatterns": [path("paged/", paged.urls)]})
    client = Client(raise_request_exception=False)
    with override_settings(ROOT_URLCONF=urls), held_requests(1) as threads:
        threads.submit(client.post, "/paged/pages", {"file": upload(b"%PDF- the only slot")})
        wait_until(lambda: len(HELD.runs) == 1)
        busy = Client(REMOTE_ADDR="10.0.8.14").post("/paged/pages", {"file": upload(b"%PDF-")})
    assert busy.status_code == 503, busy.content
    assert busy.json() == {"detail": "Every extraction slot is taken and the queue is full."}
    assert int(busy["Retry-After"]) >= 1


@pytest.mark.parametrize("method", ["put", "patch", "get"])
def test_an_operation_without_post_fails_at_declaration(method):
    """The pool reads a POST's PDF only: on a PUT (or any other method) operation ``request.pdf``
    would always be None while its schema promised the PDF body and the pool's refusals."""
    api = NinjaAPI(urls_namespace=f"pdfpool-{method}-only")
    with pytest.raises(ImproperlyConfigured, match=rf"POST.*{method.upper()} only.*@api\.post"):

        @getattr(api, method)("/op")
        @ninja.pdf_pooled
        def op(request): ...


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_an_auth_on_the_router_or_the_api_is_documented_and_answered_401(pdfpool, door):
    """ninja gives an operation its router's or its API's ``auth`` when it mounts it, after
    ``@pdf_pooled`` is registered: the schema lists 401 there too (and not on a mount of the
    same router without auth), and a request without credentials is its 401, the pool full."""
    from django.test import override_settings
    from django.urls import include, path
    from ninja import Router

    from tests.project import contrib_urls

    def bearer(request):
        return request.headers.get("Authorization") == "Bearer t-in" or None

    guarded = NinjaAPI(auth=bearer, urls_namespace="pdfpool-api-auth")
    shared, open_api = Router(), NinjaAPI(urls_namespace="pdfpool-router-auth")

    @guarded.post("/x")
    @ninja.pdf_pooled
    def x(request):
        return {"text": request.pdf.text}

    @shared.post("/y")
    @ninja.pdf_pooled
    def y(request):
        return {"text": request.pdf.text}

    guarded.add_router("/r", shared)
    open_api.add_router("/guarded", shared, auth=bearer, url_name_prefix="guarded")
    open_api.add_router("/open", shared, url_name_prefix="open")
    routes = [path("g/", guarded.urls), path("o/", open_api.urls)]
    urls = type("urls", (), {"urlpatterns": [*routes, path("", include(contrib_urls))]})
    schema = guarded.get_openapi_schema(path_prefix="/")["paths"]
    assert set(schema["/x"]["post"]["responses"]) == {200, 401, *REFUSALS}
    assert set(schema["/r/y"]["post"]["responses"]) == {200, 401, *REFUSALS}
    mounted = open_api.get_openapi_schema(path_prefix="/")["paths"]
    assert set(mounted["/guarded/y"]["post"]["responses"]) == {200, 401, *REFUSALS}
    assert set(mounted["/open/y"]["post"]["responses"]) == {200, *REFUSALS}

    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)
    HELD.reset()
    with override_settings(ROOT_URLCONF=urls), held_requests(1) as threads:
        threads.submit(send, "held", b"%PDF- holds the slot")
        wait_until(lambda: len(HELD.runs) == 1)
        client = Client(REMOTE_ADDR="10.0.8.40")
        for where in ("/g/x", "/g/r/y", "/o/guarded/y"):
            refused = client.post(where, pdfs.simple(["x"]), content_type="application/pdf")
            assert refused.status_code == 401, (where, refused.content)
        HELD.release.set()


def test_a_routers_auth_is_documented_through_decorate_view_below_the_decorator():
    """``@decorate_view`` below ``@pdf_pooled`` wraps ninja's ``run`` first: the mounted
    operation's schema still lists the router's 401."""
    import functools

    from ninja import Router
    from ninja.decorators import decorate_view

    def passing(run):
        @functools.wraps(run)
        def wrapped(request, *args, **kwargs):
            return run(request, *args, **kwargs)

        return wrapped

    router, api = Router(auth=lambda request: None), NinjaAPI(urls_namespace="pdfpool-below")

    @router.post("/z")
    @ninja.pdf_pooled
    @decorate_view(passing)
    def z(request):
        return {}

    api.add_router("/r", router)
    post = api.get_openapi_schema(path_prefix="/")["paths"]["/r/z"]["post"]
    assert set(post["responses"]) == {200, 401, *REFUSALS}


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_djangos_permission_denied_from_the_authentication_is_djangos_403(pdfpool, door):
    """ninja's default handler leaves Django's ``PermissionDenied`` to Django (403): an
    authentication raising it from the headers is that 403 at the door too, not the full
    pool's 503 to retry."""
    from django.core.exceptions import PermissionDenied
    from django.test import override_settings
    from django.urls import include, path

    from tests.project import contrib_urls

    def refusing(request):
        raise PermissionDenied("Not from here.")

    denied = NinjaAPI(urls_namespace="pdfpool-denied")

    @denied.post("/x", auth=refusing)
    @ninja.pdf_pooled
    def x(request):
        return {"text": request.pdf.text}

    routes = [path("d/", denied.urls), path("", include(contrib_urls))]
    urls = type("urls", (), {"urlpatterns": routes})
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)
    HELD.reset()
    with override_settings(ROOT_URLCONF=urls), held_requests(1) as threads:
        threads.submit(send, "held", b"%PDF- holds the slot")
        wait_until(lambda: len(HELD.runs) == 1)
        refused = Client(REMOTE_ADDR="10.0.8.41").post("/d/x", b"%PDF- x", "application/pdf")
        HELD.release.set()
    assert refused.status_code == 403, refused.content
    assert "Retry-After" not in refused
