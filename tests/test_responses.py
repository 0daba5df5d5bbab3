"""``responses``: the one path from a refusal to a response. What a client is told of each
failure (status, code, message, Retry-After), the library's answers, the one hook shape
``(request, exception)`` for ``REFUSAL_VIEW`` and ``answer=``."""

from __future__ import annotations

import asyncio
import json
from typing import ClassVar

import httpx
import pytest
from django.core.asgi import get_asgi_application
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import JsonResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.test import Client, override_settings
from django.urls import path

from django_pdfpool import PdfPoolDoor, get_pool, pdf_pooled
from django_pdfpool.exceptions import (
    BodyTimeout,
    CallerBusy,
    ExtractionError,
    LengthRequired,
    NoUpload,
    PoolBusy,
    PoolClosed,
    PoolMisconfigured,
    UploadTooLarge,
    Wording,
)
from django_pdfpool.responses import (
    MISCONFIGURED,
    Described,
    describe,
    error_answer,
    html_answer,
    json_answer,
    refusal_answer,
)

# every kind of failure, and what a client is told of it: as tested by the entries' tests
TOLD = [
    (PoolBusy("full", 1.5), Described(503, "busy", "full", 2)),
    (PoolClosed("closing"), Described(503, "closed", "closing", 1)),
    (CallerBusy("yours", 0.2), Described(429, "caller_busy", "yours", 1)),
    (
        PoolMisconfigured("ns 'prod' slots 3 vs 2", 5.0),
        Described(503, "misconfigured", MISCONFIGURED, 5),
    ),
    (
        ExtractionError("encrypted"),
        Described(422, "encrypted", "This PDF is protected by a password.", None),
    ),
    (UploadTooLarge("PDFs up to 1 MiB"), Described(413, "too_large", "PDFs up to 1 MiB", None)),
    (NoUpload("send one"), Described(400, "no_upload", "send one", None)),
    (LengthRequired("a length"), Described(411, "length_required", "a length", None)),
    (BodyTimeout("late"), Described(408, "body_timeout", "late", None)),
]


@pytest.mark.parametrize("error,told", TOLD, ids=lambda v: type(v).__name__)
def test_each_failure_is_told_with_its_status_code_message_and_retry(error, told):
    assert describe(error) == told


@pytest.mark.parametrize("error,told", TOLD, ids=lambda v: type(v).__name__)
def test_every_answer_of_the_library_says_what_describe_says(rf, error, told):
    for answer, accept in ((json_answer, "text/html"), (html_answer, "application/json")):
        response = answer(rf.post("/", HTTP_ACCEPT=accept), error)
        assert response.status_code == told.status
        assert response.get("Retry-After") == (
            None if told.retry_after is None else str(told.retry_after)
        )
        assert told.code in response.content.decode()
    as_json = json.loads(json_answer(rf.post("/"), error).content)
    assert as_json == {
        "error": told.code,
        "message": told.message,
        **({} if told.retry_after is None else {"retry_after": told.retry_after}),
    }
    # the default answers JSON to who accepts it, HTML to a browser
    assert (
        error_answer(rf.post("/", HTTP_ACCEPT="application/json"), error)["Content-Type"]
        == "application/json"
    )
    assert error_answer(rf.post("/", HTTP_ACCEPT="text/html"), error)["Content-Type"].startswith(
        "text/html"
    )


def test_the_default_answer_chosen_by_accept_says_it_varies_on_accept(rf):
    """A cache in front keeps one answer per ``Accept`` (as Django's ``vary_on_headers``)."""
    for accept in ("application/json", "text/html", "*/*"):
        response = error_answer(rf.post("/", HTTP_ACCEPT=accept), PoolBusy("full", 1.0))
        assert response["Vary"] == "Accept"
    assert "Vary" not in json_answer(rf.post("/"), PoolBusy("full", 1.0))  # one kind: no Vary


@pytest.mark.parametrize(
    "accept",
    [
        "application/json; charset=utf-8",  # a Java client's
        "application/json; version=2",  # an API versioned by its media type
        "application/json; charset=utf-8, text/html; q=0.5",
    ],
)
def test_a_client_accepting_json_with_a_parameter_gets_json(rf, accept):
    """As DRF's negotiation takes it: a range's parameters do not turn a JSON client away."""
    response = error_answer(rf.post("/", HTTP_ACCEPT=accept), PoolBusy("full", 2.0))
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["retry_after"] == 2
    browser = "text/html; level=1, application/json; q=0.5"
    assert error_answer(rf.post("/", HTTP_ACCEPT=browser), PoolBusy())["Content-Type"].startswith(
        "text/html"
    )


def test_the_integrations_tell_what_describe_tells():
    from django_pdfpool.contrib.drf import api_exception
    from django_pdfpool.contrib.ninja import PdfPoolHttpError

    for error, told in TOLD:
        drf = api_exception(error)
        codes = {"detail": told.code, "code": told.code}
        assert (drf.status_code, drf.get_codes()) == (told.status, codes)
        said = drf.detail["detail"]
        if told.retry_after is None:
            assert said == told.message
        else:  # DRF's Throttled adds the time in its own words
            assert said.startswith(f"{told.message} Expected available in {told.retry_after} ")
            assert drf.wait == told.retry_after
        ninja = PdfPoolHttpError(error)
        assert (ninja.status_code, ninja.code, ninja.message) == (
            told.status,
            told.code,
            told.message,
        )
        assert ninja.retry_after == told.retry_after


def project_refusal(request, exception):
    return JsonResponse({"project": exception.code}, status=499)


def test_one_path_answer_else_the_refusal_view_setting(pdfpool, rf):
    request = rf.post("/", HTTP_ACCEPT="application/json")
    error = PoolBusy("full", 1.0)
    assert json.loads(refusal_answer(request, error).content)["error"] == "busy"  # the default view
    pdfpool(REFUSAL_VIEW="tests.test_responses.project_refusal")
    assert json.loads(refusal_answer(request, error).content) == {"project": "busy"}
    assert refusal_answer(request, error, html_answer).status_code == 503  # answer= wins


def own_answer(request, exception):
    return JsonResponse({"code": exception.code, "status": exception.status}, status=418)


@pdf_pooled(answer=own_answer)
def answered_view(request):
    return JsonResponse({"ran": True})


class Routes:
    urlpatterns: ClassVar = [path("own/", answered_view)]


@pytest.mark.parametrize("door", [True, False])
def test_a_views_answer_answers_every_refusal_the_pool_and_the_door(pdfpool, door):
    pdfpool(DOOR=door, MAX_UPLOAD_SIZE=1000)
    with override_settings(ROOT_URLCONF=Routes):
        missing = Client().post("/own/", {"other": "x"})
        assert missing.status_code == 418 and missing.json()["code"] == "no_upload"
        assert missing.json()["status"] == 400
        big = Client().post("/own/", b"%PDF-" + b"x" * 2000, content_type="application/pdf")
        assert big.status_code == 418 and big.json()["code"] == "too_large"  # the door's, if on
        assert big.json()["status"] == 413
        unreadable = Client().post("/own/", b"not a pdf", content_type="application/pdf")
        assert unreadable.status_code == 418 and unreadable.json()["code"] == "not_a_pdf"
        assert unreadable.json()["status"] == 422


@pytest.mark.urls("tests.project.contrib_urls")
def test_the_integrations_door_answers_read_the_route_once_resolved(pdfpool, rf):
    """``door_answer`` finds the route's view (DRF) or API (ninja) from the request's
    ``resolver_match`` when it is set, resolving the URL only when it is not."""
    from django.urls import resolve

    from django_pdfpool.contrib import drf, ninja

    error = PoolBusy("full", 1.0)
    request = rf.post("/nowhere/", HTTP_ACCEPT="application/json")
    assert "handled_by" not in json.loads(ninja.door_answer(request, error).content)
    request.resolver_match = resolve("/ninja/extract")
    assert json.loads(ninja.door_answer(request, error).content)["handled_by"] == "project"
    resolved = rf.post("/ninja/extract", HTTP_ACCEPT="application/json")
    assert json.loads(ninja.door_answer(resolved, error).content)["handled_by"] == "project"
    request = rf.post("/nowhere/", HTTP_ACCEPT="application/json")
    request.resolver_match = resolve("/drf/apiview/held/")
    response = drf.door_answer(request, error)
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert "POST" in response["Allow"]  # the route's own view class answered
    assert "POST" not in drf.door_answer(rf.post("/nowhere/"), error)["Allow"]  # APIView's


def templated_refusal(request, exception):
    """A project's refusal view whose response renders later, as a class-based view's does."""
    page = engines["django"].from_string("<p>{{ code }}</p>")
    return TemplateResponse(request, page, {"code": exception.code}, status=exception.status)


async def async_templated_refusal(request, exception):
    """The same, an async view: Django runs either kind from either handler."""
    return templated_refusal(request, exception)


@pytest.mark.parametrize("view", ["templated_refusal", "async_templated_refusal"])
@pytest.mark.parametrize("door", [True, False], ids=["door-on", "door-off"])
@pytest.mark.parametrize("client", ["wsgi", "asgi"])
def test_a_refusal_view_may_answer_with_a_template_response(pdfpool, door, client, view):
    """Django renders a view's TemplateResponse, not a middleware's: the door's (the
    middleware under WSGI, ``PdfPoolDoor`` under ASGI) is rendered all the same."""
    pdfpool(REFUSAL_VIEW=f"tests.test_responses.{view}", DOOR=door)
    get_pool().close()
    if client == "wsgi":
        form = {"file": SimpleUploadedFile("doc.pdf", b"%PDF- refused")}
        response = Client(raise_request_exception=False).post("/sync/", form)
        status, content = response.status_code, response.content
    else:
        app = PdfPoolDoor(get_asgi_application())

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                files = {"file": ("doc.pdf", b"%PDF- refused", "application/pdf")}
                return await client.post("/sync/", files=files, headers={"Host": "testserver"})

        answered = asyncio.run(send())
        status, content = answered.status_code, answered.content
    assert (status, content) == (503, b"<p>closed</p>")


def no_answer(request, exception):
    return None  # a project's answer that forgot its return


@pytest.mark.parametrize("door", [True, False], ids=["door-on", "door-off"])
def test_a_refusal_view_that_returns_no_response_is_named_in_the_error(pdfpool, door):
    """Not Django's "the view didn't return an HttpResponse" (the view never ran), nor an
    AttributeError from the door: the project's function is named."""
    pdfpool(REFUSAL_VIEW="tests.test_responses.no_answer", DOOR=door)
    get_pool().close()
    form = {"file": SimpleUploadedFile("doc.pdf", b"%PDF- refused")}
    with pytest.raises(TypeError, match="refusal view no_answer returned None, not an Http"):
        Client().post("/sync/", form)


REFUSALS = {
    "Refused", "PoolBusy", "CallerBusy", "PoolClosed", "RunnerLost", "CoordinatorUnavailable",
    "PoolMisconfigured", "SandboxUnavailable", "UploadRejected", "UploadTooLarge", "NoUpload",
    "BadDigest", "RepeatedHeader", "LengthRequired", "BodyTimeout", "DigestMismatch",
}  # fmt: skip


def test_every_refusal_is_worded_in_exceptions_only():
    """No module but ``exceptions`` words a refusal: each is raised with a ``Wording``
    sentence (or a message made elsewhere), never a string written where it is raised."""
    import ast
    from pathlib import Path

    import django_pdfpool

    package = Path(django_pdfpool.__file__).parent
    worded_here = []
    for module in sorted(package.rglob("*.py")):
        if module.name == "exceptions.py" and module.parent == package:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) in REFUSALS):
                continue
            if node.args and isinstance(node.args[0], ast.Constant | ast.JoinedStr):
                worded_here.append(f"{module.relative_to(package)}:{node.lineno}")
    assert worded_here == []


def test_refusals_speak_of_the_pools_slots_not_of_workers():
    """A "worker" reads as the server's: every refusal names the pool's slots instead."""
    worded = [value for name, value in vars(Wording).items() if name.isupper()]
    assert len(worded) > 20
    assert [said for said in worded if "worker" in said.lower()] == []


def test_the_deployment_pages_logging_filter_drops_the_refusals_django_logs(rf):
    """docs/deployment.md's ``not_a_refusal`` keeps a 503 or 429 out of the admins' mail: it
    reads what ``log_response`` puts on the record (``status_code``), a 500 passes."""
    import logging
    import re
    from pathlib import Path

    from django.http import HttpResponse
    from django.utils.log import log_response

    page = (Path(__file__).parents[1] / "docs" / "deployment.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "not_a_refusal" in b]
    assert blocks
    records: list[logging.LogRecord] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("django.request")
    kept = Kept()
    logger.addHandler(kept)
    try:
        for status in (503, 429, 500):
            log_response("answered", response=HttpResponse(status=status), request=rf.post("/"))
    finally:
        logger.removeHandler(kept)
    for block in blocks:
        found: dict[str, object] = {}
        exec(block, found)
        keep = found["not_a_refusal"]
        assert [keep(record) for record in records] == [False, False, True]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("size", "said"),
    [(50 << 20, "50 MiB"), (3 << 19, "1.5 MiB"), (2560, "2.5 KiB"), (3000, "3000 bytes")],
)
def test_the_size_limit_is_said_exactly(size, said):
    """Never "2.92969 KiB": the largest unit the limit is said in exactly (to a tenth)."""
    assert str(UploadTooLarge.over(size)) == f"PDFs up to {said} are accepted."
