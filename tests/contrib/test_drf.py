"""``django_pdfpool.contrib.drf`` with the real Django REST framework, through Django's test
client: APIView handlers, ``@api_view`` functions and ViewSet actions; the caller is DRF's
authenticated user; a request without credentials is 401 before any work (one its
permissions refuse, DRF's 403); refusals pass
through the project's ``EXCEPTION_HANDLER``; multipart and raw bodies leave
``request.data`` readable; a misplaced decorator fails at import."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import io
import os

import pytest
from django.conf import global_settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.views import View
from ninja import File, NinjaAPI, UploadedFile
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    parser_classes,
    permission_classes,
)
from rest_framework.parsers import FileUploadParser, MultiPartParser
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

import django_pdfpool
from django_pdfpool import get_pool
from django_pdfpool.contrib import drf, ninja
from django_pdfpool.exceptions import (
    EXTRACTION_MESSAGES,
    ExtractionError,
    UploadTooLarge,
    Wording,
)
from tests.conftest import held_requests, wait_until
from tests.project.contrib_views import described
from tests.project.views import HELD, PARSED, held_job
from tests.support import pdfs
from tests.test_decorators import upload

pytestmark = pytest.mark.urls("tests.project.contrib_urls")

HELD_ROUTES = [
    "/drf/apiview/held/",  # APIView.post
    "/drf/function/held/",  # @api_view
    "/drf/documents/",  # ViewSet create
    "/drf/documents/above/",  # a ViewSet @action, the decorator above it
]
SOON = 60


@pytest.fixture(autouse=True)
def project_handler(settings):
    settings.REST_FRAMEWORK = {"EXCEPTION_HANDLER": "tests.project.contrib_views.handled"}


def send(url, data, user="alice", raw=False, ip="10.0.7.1", **extra):
    client = Client(REMOTE_ADDR=ip)
    headers = {"HTTP_ACCEPT": "application/json", **extra}
    if user is not None:
        headers["HTTP_AUTHORIZATION"] = f"Token {user}"
    if raw:
        return client.post(url, data, content_type="application/pdf", **headers)
    return client.post(url, {"file": upload(data)}, **headers)


@pytest.mark.parametrize("raw", [False, True], ids=["multipart", "raw"])
@pytest.mark.parametrize("url", [*HELD_ROUTES, "/drf/apiview/extract/"])
def test_each_route_kind_serves_multipart_and_raw_bodies(pdfpool, url, raw):
    HELD.reset()
    HELD.release.set()
    data = pdfs.simple([f"through {url}"])
    response = send(url, data, raw=raw)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["pdf"]["sha256"] == hashlib.sha256(data).hexdigest()
    if "extract" in url:
        assert body["pdf"]["text"] == f"through {url}"
    assert body["data"] == ["file"]  # request.data, parsed by the view's own parsers
    assert body["user"] == "alice"
    assert os.listdir(pdfpool.staged) == []


@pytest.mark.parametrize("url", HELD_ROUTES)
def test_the_caller_is_drfs_user_not_the_address(pdfpool, url):
    """Two token users behind one address each get a job; the same user's second upload
    is 429 through DRF's handler, with Retry-After from ``wait``."""
    HELD.reset()
    with held_requests(2) as threads:
        first = threads.submit(send, url, b"%PDF- alice's")
        wait_until(lambda: len(HELD.runs) == 1)
        second = threads.submit(send, url, b"%PDF- bob's", user="bob")
        wait_until(lambda: len(HELD.runs) == 2)
        again = send(url, b"%PDF- alice's second", raw=True)
        assert again.status_code == 429, again.content
        assert int(again["Retry-After"]) >= 1
        body = again.json()
        assert body["handled_by"] == "project" and body["code"] == "caller_busy"
        assert "already" in body["detail"]
        HELD.release.set()
        assert first.result(SOON).json()["user"] == "alice"
        assert second.result(SOON).json()["user"] == "bob"


@pytest.mark.parametrize("url", HELD_ROUTES)
def test_a_request_without_a_token_is_401_before_any_extraction(pdfpool, url):
    HELD.reset()
    HELD.release.set()
    response = send(url, pdfs.simple(["nobody"]), user=None)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert HELD.runs == []
    assert get_pool().snapshot().counters.started == 0
    assert os.listdir(pdfpool.staged) == []


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_user_the_permissions_refuse_gets_drfs_403_not_the_doors_413(pdfpool, door):
    """Any DRF exception its authentication or permissions raise from the headers is DRF's
    answer, before the door's own (a declared size over the limit here)."""
    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door)
    environ = {"wsgi.input": io.BytesIO(), "CONTENT_LENGTH": "100000000"}
    response = Client(REMOTE_ADDR="10.0.7.9").generic(
        "POST", "/drf/function/admins/", content_type="application/pdf",
        HTTP_ACCEPT="application/json", HTTP_AUTHORIZATION="Token alice", **environ,
    )  # fmt: skip
    assert response.status_code == 403, response.content
    assert response.json() == {"detail": "You do not have permission to perform this action."}


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_permission_that_reads_the_body_is_asked_with_the_body(pdfpool, door):
    """A permission reading ``request.data`` cannot tell from the headers: the door's empty
    copy of the body would refuse what the real one lets through, so DRF answers with it."""
    pdfpool(DOOR=door)
    HELD.reset()
    HELD.release.set()
    form = {"title": "kept", "file": upload(pdfs.simple(["titled"]))}
    response = Client(REMOTE_ADDR="10.0.7.8").post(
        "/drf/function/titled/", form, HTTP_ACCEPT="application/json",
        HTTP_AUTHORIZATION="Token alice",
    )  # fmt: skip
    assert response.status_code == 200, response.content
    untitled = send("/drf/function/titled/", pdfs.simple(["untitled"]), ip="10.0.7.7")
    assert untitled.status_code == 403


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_an_accept_drf_cannot_satisfy_is_its_406_before_the_pools_refusal(pdfpool, door):
    """DRF negotiates the response before authenticating: with the pool full, an ``Accept``
    no renderer of the view satisfies is DRF's 406, at the door as in the view."""
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        refused = send("/drf/documents/", b"%PDF- two", user="carol", HTTP_ACCEPT="text/csv")
    assert refused.status_code == 406, refused.content
    assert "Accept" in refused.json()["detail"] and "Retry-After" not in refused
    assert len(HELD.runs) == 1


class _Suffixed(APIView):
    """Django's own ``Http404`` (a format suffix no renderer has, DRF's negotiation raises it)
    or ``PermissionDenied`` (from a permission), each DRF's handler answers as its own."""

    from tests.project.contrib_views import Token as _Token

    authentication_classes = (_Token,)
    parser_classes = (MultiPartParser, drf.PdfParser)

    class Djangos(BasePermission):
        def has_permission(self, request, view):
            from django.core.exceptions import PermissionDenied

            if request.user.pk == "mallory":
                raise PermissionDenied("Not mallory.")
            return True

    permission_classes = (Djangos,)

    @drf.pdf_pooled(job=held_job)
    def post(self, request, format=None):
        return Response(described(request))


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
@pytest.mark.parametrize(
    ("where", "user", "status"),
    [("/suffixed.xml", "bob", 404), ("/suffixed.json", "mallory", 403)],
    ids=["unknown-format", "djangos-permission-denied"],
)
def test_djangos_exceptions_drf_answers_are_drfs_answers_with_the_pool_full(
    pdfpool, door, where, user, status
):
    """DRF's handler answers Django's ``Http404`` and ``PermissionDenied`` as its ``NotFound``
    and ``PermissionDenied``, in the view's format: so does the door, not Django's page."""
    from django.test import override_settings
    from django.urls import include, path
    from rest_framework.urlpatterns import format_suffix_patterns

    from tests.project import contrib_urls

    suffixed = format_suffix_patterns([path("suffixed", _Suffixed.as_view())])
    urls = type("urls", (), {"urlpatterns": [*suffixed, path("", include(contrib_urls))]})
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)
    HELD.reset()
    with override_settings(ROOT_URLCONF=urls), held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        refused = send(where, b"%PDF- two", user=user, raw=True)
        HELD.release.set()
    assert refused.status_code == status, refused.content
    assert refused["Content-Type"] == "application/json", refused.content
    assert "Retry-After" not in refused and len(HELD.runs) == 1


def test_a_full_pool_is_503_through_the_projects_handler(pdfpool):
    """With the door off (it answers before DRF, through REFUSAL_VIEW), the pool's 503
    comes from the decorator, as a DRF exception."""
    pdfpool(SLOTS=1, QUEUE=0, DOOR=False)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        busy = send("/drf/documents/", b"%PDF- two", user="carol")
    assert busy.status_code == 503
    assert int(busy["Retry-After"]) >= 1
    assert busy.json()["code"] == "busy" and busy.json()["handled_by"] == "project"


def test_the_door_answers_drf_routes_through_the_projects_handler(pdfpool, settings):
    """The door (AdmissionMiddleware here) refuses before DRF runs (no body parsed), and
    answers as the view would: the route's DRF view, its exception handler and renderers."""
    pdfpool(SLOTS=1, QUEUE=0, MAX_UPLOAD_SIZE=2000, DOOR={"BUDGET": 0})  # no body that may join
    recording = "tests.project.views.RecordingUploadHandler"
    settings.FILE_UPLOAD_HANDLERS = [recording, *global_settings.FILE_UPLOAD_HANDLERS]
    PARSED.clear()
    declared = send("/drf/documents/", b"%PDF-" + b"x" * 500_000)
    assert declared.status_code == 413
    assert declared.json()["handled_by"] == "project" and declared.json()["code"] == "too_large"
    assert list(PARSED) == []  # refused from its header: the body was never parsed
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        PARSED.clear()  # the job's own upload was parsed; none of those below may be
        for url in HELD_ROUTES:
            busy = send(url, b"%PDF- two", user="carol")  # may join, but no budget: shed
            assert busy.status_code == 503, busy.content
            assert int(busy["Retry-After"]) >= 1
            assert busy.json()["handled_by"] == "project" and busy.json()["code"] == "busy"
            assert busy["Content-Type"] == "application/json"
    assert len(HELD.runs) == 1 and list(PARSED) == []  # refused before the body


class ReadCounted(io.BytesIO):
    """A body that counts the bytes read of it."""

    taken = 0

    def read(self, size=-1):
        data = super().read(size)
        self.taken += len(data)
        return data

    def readline(self, size=-1):
        data = super().readline(size)
        self.taken += len(data)
        return data


@pytest.mark.django_db
def test_the_doors_answer_to_a_session_user_reads_none_of_the_body(pdfpool, django_user_model):
    """A signed-in user of ``SessionAuthentication`` without a CSRF header: DRF's CSRF check
    reads the form. Refused at the door (the pool full), the answer is given from the headers:
    not a byte of the body read, as for any caller (a slow body would hold the worker)."""
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0})
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR="10.0.7.12")
    client.force_login(django_user_model.objects.create(username="sam"))
    client.cookies["csrftoken"] = "A" * 32
    body = encode_multipart(BOUNDARY, {"file": upload(b"%PDF- two" + b"x" * 100_000)})
    stream = ReadCounted(body)
    environ = {"wsgi.input": stream, "CONTENT_LENGTH": str(len(body)),
               "CONTENT_TYPE": MULTIPART_CONTENT}  # fmt: skip
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- one")
        wait_until(lambda: len(HELD.runs) == 1)
        busy = client.generic(
            "POST", "/drf/apiview/session/", HTTP_ACCEPT="application/json", **environ
        )
    assert busy.status_code == 503, busy.content
    assert busy.json()["code"] == "busy" and int(busy["Retry-After"]) >= 1
    assert stream.taken == 0


def expected_in(response) -> str:
    """The end of a throttle's text in DRF's words, for the response's Retry-After."""
    seconds = int(response["Retry-After"])
    assert seconds >= 1
    return f"Expected available in {seconds} second{'s' if seconds > 1 else ''}."


@pytest.mark.parametrize("door", [False, True], ids=["decorator", "door"])
def test_drfs_own_handler_answers_a_code_and_the_time_in_every_refusal(pdfpool, settings, door):
    """Without a project handler, DRF's own: every body is ``{"detail", "code"}``, and the
    503's text, like the 429's, ends with the time its Retry-After gives (the door's 503
    too, answered through DRF before authentication)."""
    settings.REST_FRAMEWORK = {}
    pdfpool(SLOTS=2, QUEUE=0, MAX_UPLOAD_SIZE=2000, DOOR={"BUDGET": 0} if door else False)
    HELD.reset()
    with held_requests(2) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- one")
        threads.submit(send, "/drf/function/held/", b"%PDF- two", user="bob")
        wait_until(lambda: len(HELD.runs) == 2)
        mine = send("/drf/documents/", b"%PDF- alice's second")
        busy = send("/drf/documents/", b"%PDF- three", user="carol")
        HELD.release.set()
    assert mine.status_code == 429, mine.content  # the door asks DRF who alice is
    assert mine.json() == {
        "detail": f"{Wording.CALLER_BUSY} {expected_in(mine)}",
        "code": "caller_busy",
    }
    assert busy.status_code == 503, busy.content
    assert busy.json() == {"detail": f"{Wording.QUEUE_FULL} {expected_in(busy)}", "code": "busy"}
    too_large = send("/drf/apiview/extract/", b"%PDF-" + b"x" * 5000, raw=True)
    assert too_large.status_code == 413
    assert too_large.json() == {"detail": str(UploadTooLarge.over(2000)),
                                "code": "too_large"}  # fmt: skip
    assert "Retry-After" not in too_large


def test_413_422_and_400_are_drf_exceptions_too(pdfpool):
    pdfpool(MAX_UPLOAD_SIZE=2000, DOOR=False)
    too_large = send("/drf/apiview/extract/", b"%PDF-" + b"x" * 5000, raw=True)
    assert too_large.status_code == 413 and too_large.json()["code"] == "too_large"
    unreadable = send("/drf/apiview/extract/", b"not a pdf at all")
    assert unreadable.status_code == 422 and unreadable.json()["code"] == "not_a_pdf"
    empty = Client().post("/drf/apiview/extract/", {"other": "x"}, HTTP_AUTHORIZATION="Token dave")
    assert empty.status_code == 400 and empty.json()["code"] == "no_upload"
    assert os.listdir(pdfpool.staged) == []


def test_a_raw_body_without_pdf_parser_is_drfs_415_not_a_500(pdfpool):
    response = send("/drf/apiview/default-parsers/", pdfs.simple(["raw"]), raw=True)
    assert response.status_code == 415
    assert "application/pdf" in response.json()["detail"]
    assert get_pool().snapshot().counters.started == 0
    multipart = send("/drf/apiview/default-parsers/", pdfs.simple(["multipart"]))
    assert multipart.status_code == 200 and multipart.json()["pdf"]["text"] == "multipart"


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_body_no_parser_takes_is_drfs_415_with_the_pool_full(pdfpool, door):
    """The handler's first read meets DRF's 415 before the pool: with the pool full too, a
    raw body to a view without ``PdfParser`` is 415 (never servable), not a 503 to retry;
    a body declared over the limit is still 413 first, as the decorator checks."""
    pdfpool(SLOTS=1, QUEUE=0, DOOR=door, MAX_UPLOAD_SIZE=100_000)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- the only slot")
        wait_until(lambda: len(HELD.runs) == 1)
        raw = send("/drf/apiview/default-parsers/", pdfs.simple(["raw"]), raw=True, user="dan")
        large = send("/drf/apiview/default-parsers/", b"%PDF-" + b"x" * 200_000, raw=True)
    assert raw.status_code == 415, raw.content
    assert "application/pdf" in raw.json()["detail"] and "Retry-After" not in raw
    assert large.status_code == 413, large.content


def test_a_raw_body_over_the_limit_without_a_length_is_cut_by_pdf_parser(pdfpool):
    """``PdfParser`` stops reading at MAX_UPLOAD_SIZE even where nothing declared a size
    (the view itself, undecorated, parses)."""
    pdfpool(MAX_UPLOAD_SIZE=2000)
    request = drf.PdfParser()
    from io import BytesIO

    from rest_framework.test import APIRequestFactory

    django_request = APIRequestFactory().post("/", b"x", content_type="application/pdf")
    with pytest.raises(drf.PdfPoolError) as refused:
        request.parse(BytesIO(b"y" * 5000), "application/pdf", {"request": django_request})
    assert refused.value.status_code == 413 and refused.value.get_codes()["code"] == "too_large"


def test_a_raw_body_pdf_parser_wrote_to_disk_is_deleted_when_the_request_ends(pdfpool, settings):
    """Django closes (and so deletes) the files of ``request.FILES`` at the end of the
    request; DRF hands it a form's files only, so ``PdfParser`` hands over its own: none is
    left for the garbage collector to find."""
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1000  # to disk, in pdfpool.staged
    data = pdfs.padded("on disk", 3000)
    collecting = gc.isenabled()
    gc.disable()  # the view, its request and its parsers hold one another: no cycle collected
    try:
        response = send("/drf/apiview/extract/", data, raw=True)
        assert response.status_code == 200, response.content
        assert response.json()["data"] == ["file"]
        assert os.listdir(pdfpool.staged) == []
    finally:
        if collecting:
            gc.enable()


class ReadsTheFile(BasePermission):
    """Lets a request in once its body holds a file: a permission that parses the body."""

    def has_permission(self, request, view):
        return "file" in request.data


@api_view(["POST"])
@authentication_classes([])
@permission_classes([ReadsTheFile])
@parser_classes([drf.PdfParser])
@drf.pdf_pooled
def reads_the_file(request):
    return Response({"text": request.pdf.text})


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_no_file_pdf_parser_wrote_to_disk_waits_for_the_garbage_collector(pdfpool, settings, door):
    """A permission parsing the body before the handler: ``PdfParser``'s file cut at the limit
    (413), and those it writes parsing the door's header-only copies of the request, are
    deleted when they are done with, as the file of a request Django closes."""
    from django.test import override_settings
    from django.urls import path

    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1000  # to disk, in pdfpool.staged
    pdfpool(MAX_UPLOAD_SIZE=3000, DOOR=door)
    urls = type("urls", (), {"urlpatterns": [path("reads/", reads_the_file)]})
    collecting = gc.isenabled()
    gc.disable()  # the view, its request and its parsers hold one another: no cycle collected
    try:
        with override_settings(ROOT_URLCONF=urls):
            client = Client(REMOTE_ADDR="10.0.7.13")
            over = client.post("/reads/", b"%PDF-" + b"x" * 8000, "application/pdf")
            assert over.status_code == 413, over.content
            assert os.listdir(pdfpool.staged) == []
            served = client.post("/reads/", pdfs.padded("read first", 1500), "application/pdf")
            assert served.status_code == 200, served.content
            assert served.json() == {"text": "read first"}
            assert os.listdir(pdfpool.staged) == []
    finally:
        if collecting:
            gc.enable()


class OpsOnly(BasePermission):
    """A permission reading what the view's ``setup()`` set."""

    def has_permission(self, request, view):
        return view.team == "ops"


class TeamAPIView(APIView):
    """Sets up, as Django's class-based views do, what its permission reads."""

    authentication_classes = ()
    permission_classes = (OpsOnly,)
    parser_classes = (drf.PdfParser,)

    def setup(self, request, *args, **kwargs):
        super().setup(request, *args, **kwargs)
        self.team = request.headers.get("X-Team", "")

    @drf.pdf_pooled(job=held_job)
    def post(self, request):
        return Response(described(request))


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_the_checks_of_a_view_that_sets_itself_up_are_its_own_at_the_door(pdfpool, door):
    """Django's ``as_view()`` calls ``setup()`` before DRF's checks: with the pool full, the
    door asks them of a view set up as DRF's would be (its 403, not a 503 to retry)."""
    from django.test import override_settings
    from django.urls import path

    urls = type("urls", (), {"urlpatterns": [path("team/", TeamAPIView.as_view())]})
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(send, "/drf/function/held/", b"%PDF- the only slot")
        wait_until(lambda: len(HELD.runs) == 1)
        with override_settings(ROOT_URLCONF=urls):
            client = Client(REMOTE_ADDR="10.0.7.14")
            answers = {
                team: client.post("/team/", b"%PDF- mine", "application/pdf", HTTP_X_TEAM=team)
                for team in ("dev", "ops")
            }
    assert answers["dev"].status_code == 403, answers["dev"].content
    assert answers["ops"].status_code == 503, answers["ops"].content


async def failing_job(upload):
    """A job that fails as a broken PDF does, once HELD lets it go."""
    HELD.runs.append(upload.sha256)
    while not HELD.release.is_set():
        await asyncio.sleep(0.005)
    raise ExtractionError("crashed", detail="the child died")


@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
@parser_classes([MultiPartParser, drf.PdfParser])
@drf.pdf_pooled(job=failing_job)
def failing_function(request):
    return Response(described(request))


def test_a_jobs_failure_reaches_every_sharer_in_its_frameworks_format(pdfpool):
    """One job shared by a DRF form, a DRF raw body and a ninja operation: its failure is
    each one's 422, as its framework answers errors (DRF's detail and code, ninja's detail)."""
    from django.test import override_settings
    from django.urls import path

    shared = NinjaAPI(urls_namespace="pdfpool-failing")

    @shared.post("/x")
    @ninja.pdf_pooled(job=failing_job)
    async def x(request, file: File[UploadedFile]):
        return {}

    urls = type("urls", (), {"urlpatterns": [path("drf/", failing_function),
                                             path("ninja/", shared.urls)]})  # fmt: skip

    def post(ip, url, data, **kind):
        with override_settings(ROOT_URLCONF=urls):
            return Client(REMOTE_ADDR=ip).post(url, data, HTTP_ACCEPT="application/json", **kind)

    data = b"%PDF- breaks"
    HELD.reset()
    with held_requests(3) as threads:
        form = threads.submit(post, "10.0.7.15", "/drf/", {"file": upload(data)})
        wait_until(lambda: len(HELD.runs) == 1)
        raw = threads.submit(post, "10.0.7.16", "/drf/", data, content_type="application/pdf")
        operation = threads.submit(post, "10.0.7.17", "/ninja/x", {"file": upload(data)})
        wait_until(lambda: get_pool().snapshot().counters.joined == 2)
        HELD.release.set()
        answers = [answer.result(SOON) for answer in (form, raw, operation)]
    said = EXTRACTION_MESSAGES["crashed"]
    assert [answer.status_code for answer in answers] == [422] * 3
    drfs = {"detail": said, "code": "crashed", "handled_by": "project"}  # its EXCEPTION_HANDLER
    assert answers[0].json() == answers[1].json() == drfs
    assert answers[2].json() == {"detail": said}
    assert len(HELD.runs) == 1 and os.listdir(pdfpool.staged) == []


class NamedUploadAPIView(APIView):
    """DRF's own ``FileUploadParser``: any type of body, its file name in the URL."""

    authentication_classes = ()
    permission_classes = ()
    parser_classes = (FileUploadParser,)

    @drf.pdf_pooled
    def put(self, request, filename):  # not pooled: DRF's way, a PUT, runs as it is
        return Response({"pdf": request.pdf, "name": request.data["file"].name})

    @drf.pdf_pooled
    def post(self, request, filename):
        return Response({"text": request.pdf.text, "name": request.data["file"].name})


class FieldNamedUploadAPIView(NamedUploadAPIView):
    """The same, its form field named: ``FileUploadParser`` still files the body as "file"."""

    @drf.pdf_pooled(field="document")
    def post(self, request, filename):
        return Response({"text": request.pdf.text, "name": request.data["file"].name})


@pytest.mark.parametrize("view", [NamedUploadAPIView, FieldNamedUploadAPIView])
@pytest.mark.parametrize("content_type", ["application/pdf", "application/octet-stream"])
def test_drfs_file_upload_parser_with_the_file_name_in_the_url_gives_the_pdf(
    pdfpool, content_type, view
):
    from django.test import override_settings
    from django.urls import path

    named = path("up/<str:filename>", view.as_view())
    urls = type("urls", (), {"urlpatterns": [named]})
    data = pdfs.simple(["named in the URL"])
    with override_settings(ROOT_URLCONF=urls):
        client = Client(REMOTE_ADDR="10.0.7.18")
        posted = client.post("/up/report.pdf", data, content_type)
        put = client.put("/up/report.pdf", data, content_type)
    assert posted.status_code == 200, posted.content
    assert posted.json() == {"text": "named in the URL", "name": "report.pdf"}
    assert put.json() == {"pdf": None, "name": "report.pdf"}


def _post(self, request): ...


def test_misplaced_decorators_fail_at_import():
    with pytest.raises(ImproperlyConfigured, match="method_decorator"):
        django_pdfpool.pdf_pooled(_post)
    with pytest.raises(ImproperlyConfigured, match="before DRF authenticates"):
        django_pdfpool.pdf_pooled(api_view(["POST"])(lambda request: None))
    with pytest.raises(ImproperlyConfigured, match="before DRF authenticates"):
        django_pdfpool.pdf_pooled(APIView.as_view())
    with pytest.raises(ImproperlyConfigured, match="below @api_view"):
        drf.pdf_pooled(api_view(["POST"])(lambda request: None))
    with pytest.raises(ImproperlyConfigured, match="synchronous"):

        async def handler(self, request): ...

        drf.pdf_pooled(handler)
    # a plain Django class-based view wrapped whole still works: no DRF authentication
    assert getattr(django_pdfpool.pdf_pooled(View.as_view()), "pdfpool_view", None)
    # the job name is still checked first
    with pytest.raises(ImproperlyConfigured, match="job_name"):
        drf.pdf_pooled(job=lambda upload: None)
    assert drf.pdf_pooled(job=held_job)


def test_check_warns_of_framework_routes_pooled_by_the_plain_decorator(settings):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from django_pdfpool.checks import check_integrations

    assert check_integrations() == []  # tests.project.contrib_urls: the integrations everywhere
    settings.ROOT_URLCONF = "tests.project.contrib_misplaced_urls"
    warned = {(w.id, w.msg.split()[2]) for w in check_integrations()}
    assert warned == {
        ("django_pdfpool.W101", "/plain/function/"),
        ("django_pdfpool.W101", "/plain/apiview/"),
        ("django_pdfpool.W101", "/ninja/plain"),
    }
    with pytest.raises(SystemCheckError, match="W101"):
        call_command("check", "--fail-level", "WARNING")


def test_the_door_answers_a_browser_with_drfs_browsable_api(pdfpool, settings):
    """Content negotiation at the door is the view's: a browser gets DRF's HTML page."""
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "rest_framework"]
    pdfpool(MAX_UPLOAD_SIZE=2000)
    response = send(
        "/drf/apiview/default-parsers/",
        b"%PDF-",
        raw=True,
        HTTP_ACCEPT="text/html",
        CONTENT_LENGTH="99999999",
    )
    assert response.status_code == 413
    assert response["Content-Type"].startswith("text/html")
    assert b"Django REST framework" in response.content


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_client_the_throttles_refuse_gets_drfs_429_with_the_pool_full(pdfpool, door):
    """DRF's throttles come before the handler: a client they refuse gets their 429 (their
    Retry-After) whatever the pool says, the door's refusal included; a request the door
    lets in is counted once."""
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0} if door else False)  # refused at the door
    again, fresh = throttled_and_not("/drf/function/throttled/", lambda body: body)
    assert again.status_code == 429 and int(again["Retry-After"]) > 3600, again.content
    assert fresh.status_code == 503 and int(fresh["Retry-After"]) < 3600, fresh.content


def throttled_and_not(url, data):
    """With the slot held, the answers to a client whose one upload a day is spent and to a
    fresh one; ``data(body)`` is what the route takes (a raw body, or a form)."""
    cache.clear()

    def send(body, address):
        kind = {"content_type": "application/pdf"} if isinstance(data(body), bytes) else {}
        return Client(REMOTE_ADDR=address).post(
            url, data(body), HTTP_ACCEPT="application/json", **kind
        )

    HELD.reset()
    HELD.release.set()
    assert send(b"%PDF- the day's one", "10.3.3.3").status_code == 200
    HELD.reset()
    with held_requests(1) as threads:
        holder = Client(REMOTE_ADDR="10.3.3.1")
        threads.submit(holder.post, "/ninja/anonymous", {"file": upload(b"%PDF- holds it")})
        wait_until(lambda: len(HELD.runs) == 1)
        answers = send(b"%PDF- another", "10.3.3.3"), send(b"%PDF- a third", "10.3.3.4")
        HELD.release.set()
    return answers


def test_the_schema_generator_describes_a_pooled_view_as_any_other(settings):
    """DRF's OpenAPI generator reads a pooled ``post`` as it reads any: the parsers' media
    types, and the serializer's ``FileField`` as a binary form field (docs/drf.md)."""
    pytest.importorskip("uritemplate")  # DRF's own requirement for OpenAPI schemas
    from django.test import override_settings
    from django.urls import path
    from rest_framework import generics, serializers
    from rest_framework.schemas.openapi import SchemaGenerator

    class Upload(serializers.Serializer):
        file = serializers.FileField()

    class Described(generics.GenericAPIView):
        serializer_class = Upload
        parser_classes = (MultiPartParser, drf.PdfParser)

        @drf.pdf_pooled
        def post(self, request):
            return Response(described(request))

    urls = type("urls", (), {"urlpatterns": [path("described/", Described.as_view())]})
    with override_settings(ROOT_URLCONF=urls):
        schema = SchemaGenerator(title="pdfpool").get_schema(request=None, public=True)
    body = schema["paths"]["/described/"]["post"]["requestBody"]["content"]
    assert list(body) == ["multipart/form-data", "application/pdf"]
    fields = schema["components"]["schemas"]["Upload"]["properties"]
    assert fields["file"] == {"type": "string", "format": "binary"}
