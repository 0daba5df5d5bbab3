"""docs/drf.md's and docs/ninja.md's examples served: their views routed as a project would
route them, real uploads extracted, and a refusal (the pool closed) answered as each page
shows it."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from django.test import Client, override_settings
from django.urls import path

from django_pdfpool import get_pool
from tests.support import pdfs
from tests.test_decorators import upload
from tests.test_docs import fences_of
from tests.test_docs_code import module

DOCS = Path(__file__).resolve().parents[1] / "docs"


def routed(name: str, *patterns: object) -> str:
    """A urlconf module ``name`` holding ``patterns``, for ROOT_URLCONF."""
    urls = types.ModuleType(name)
    urls.urlpatterns = list(patterns)  # type: ignore[attr-defined]
    sys.modules[name] = urls
    return name


def shown_answer(page: str) -> tuple[int, dict[str, str], dict[str, object]]:
    """The status, headers and JSON body of ``page``'s ```http block."""
    (block,) = [b for b in fences_of(DOCS / page).blocks if b.language == "http"]
    head, _, body = block.body.partition("\n\n")
    status_line, *header_lines = head.splitlines()
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, json.loads(body)


def test_the_drf_example_extracts_and_refuses_as_the_page_shows(pdfpool):
    pytest.importorskip("rest_framework")
    views = module("docs_drf_served", fences_of(DOCS / "drf.md").blocks[0])
    urls = routed(
        "docs_drf_urls",
        path("extract/", views.ExtractView.as_view()),
        path("function/", views.extract_function),
    )
    with override_settings(ROOT_URLCONF=urls):
        client = Client(REMOTE_ADDR="10.0.12.1")
        data = pdfs.simple(["the DRF page's text"])
        done = client.post("/extract/", {"file": upload(data)})
        named = client.post("/function/", {"document": upload(data)})
        get_pool().close()
        refused = client.post("/extract/", {"file": upload(pdfs.simple(["refused"]))})
    assert done.status_code == 200, done.content
    assert done.json() == {"pages": 1, "text": "the DRF page's text"}
    assert named.status_code == 200 and named.json() == {"text": "the DRF page's text"}
    status, headers, body = shown_answer("drf.md")
    assert refused.status_code == status == 503
    assert "Retry-After" in refused and "Retry-After" in headers
    assert refused["Content-Type"] == headers["Content-Type"]
    answered = refused.json()
    assert set(answered) == set(body) == {"detail", "code"}
    assert answered["code"] == "closed" and body["code"] == "busy"  # another refusal, one form
    wait = refused["Retry-After"]
    assert re.fullmatch(r".+ Expected available in \d+ seconds?\.", answered["detail"])
    assert answered["detail"].endswith(f"in {wait} second{'s' if wait != '1' else ''}.")


def test_the_ninja_example_extracts_and_refuses_through_its_handler(pdfpool):
    pytest.importorskip("ninja")
    operations = module("docs_ninja_served", fences_of(DOCS / "ninja.md").blocks[0])
    urls = routed("docs_ninja_urls", path("api/", operations.api.urls))
    bearer = {"HTTP_AUTHORIZATION": "Bearer secret"}
    with override_settings(ROOT_URLCONF=urls):
        client = Client(REMOTE_ADDR="10.0.12.2")
        data = pdfs.simple(["the ninja page's text"])
        done = client.post("/api/extract", {"file": upload(data)}, **bearer)
        raw = client.post("/api/extract-raw", data, content_type="application/pdf", **bearer)
        anonymous = client.post("/api/extract", {"file": upload(data)})
        get_pool().close()
        refused = client.post("/api/extract-raw", {"file": upload(data)}, **bearer)
    assert done.status_code == 200, done.content
    assert done.json() == {"pages": 1, "text": "the ninja page's text"}
    assert raw.status_code == 200 and raw.json() == {"text": "the ninja page's text"}
    assert anonymous.status_code == 401
    assert refused.status_code == 503 and "Retry-After" in refused
    answered = refused.json()
    assert set(answered) == {"detail", "code", "retry_after"} and answered["code"] == "closed"
