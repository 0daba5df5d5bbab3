"""The code of docs/quickstart.md and docs/usage.md, run: each Python block is executed as a
module (imports, decorators: a misplaced one fails at import), and the views it defines
answer real requests through Django's test client, with real extraction. Also the first
blocks of docs/drf.md and docs/ninja.md, which decorate at import."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import sys
import types
from pathlib import Path

import pytest
from django.test import Client, RequestFactory, override_settings

from django_pdfpool.exceptions import CallerBusy
from tests.support import pdfs
from tests.test_decorators import upload
from tests.test_docs import Block, fences_of

DOCS = Path(__file__).resolve().parents[1] / "docs"


def blocks(page: str) -> list[Block]:
    return [b for b in fences_of(DOCS / page).blocks if b.language == "python"]


def module(name: str, block: Block, **names: object) -> types.ModuleType:
    """``block`` executed as the module ``name`` (registered in sys.modules)."""
    made = types.ModuleType(name)
    made.__dict__.update(names)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code = compile(block.body, f"<{name}>", "exec", flags=flags, dont_inherit=True)
    result = eval(code, made.__dict__)  # a coroutine when the block awaits at top level
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    sys.modules[name] = made
    return made


def _page(page: str) -> str:
    return " ".join((DOCS / page).read_text().split())  # lines joined, as a reader reads


def titled(page: str, title: str) -> Block:
    return next(b for b in blocks(page) if b.title == title)


# --- the quickstart ----------------------------------------------------------------


@pytest.fixture
def mysite(monkeypatch):
    package = types.ModuleType("mysite")
    package.__path__ = []
    monkeypatch.setitem(sys.modules, "mysite", package)
    views = module("mysite.views", titled("quickstart.md", "mysite/views.py"))
    package.views = views
    monkeypatch.setitem(sys.modules, "mysite.views", views)
    urls = module("mysite.urls", titled("quickstart.md", "mysite/urls.py"))
    monkeypatch.setitem(sys.modules, "mysite.urls", urls)
    yield urls
    sys.modules.pop("mysite.urls", None)
    sys.modules.pop("mysite.views", None)


def test_the_quickstart_settings_block_runs():
    names = module(
        "quickstart_settings",
        titled("quickstart.md", "mysite/settings.py (at the end)"),
        INSTALLED_APPS=["django.contrib.admin"],
        BASE_DIR=Path("/srv"),
    )
    assert names.INSTALLED_APPS[-1] == "django_pdfpool"
    assert names.PDFPOOL == {"SLOTS": 2, "QUEUE": 4, "WAIT": 10.0}


def test_the_quickstart_view_answers_as_the_page_says(pdfpool, mysite):
    with override_settings(ROOT_URLCONF="mysite.urls"):
        client = Client(REMOTE_ADDR="10.0.11.1")
        usage = client.get("/api/extract/")
        data = pdfs.simple(["the quickstart's text"])
        extracted = client.post("/api/extract/", {"file": upload(data)})
        refused = client.post("/api/extract/", {"file": upload(b"not a pdf")})
    assert usage.json() == {"usage": "POST a PDF in the multipart field 'file'"}
    assert extracted.status_code == 200
    assert extracted.json() == {"pages": 1, "text": "the quickstart's text"}
    said = re.search(r'`(\{"error": "not_a_pdf".*?\})` with status (\d+)', _page("quickstart.md"))
    assert said is not None, "the quickstart shows the 422's body"
    assert refused.status_code == int(said[2])
    assert refused.json() == json.loads(said[1])


# --- usage.md ----------------------------------------------------------------------


@pytest.mark.parametrize("block", blocks("usage.md"), ids=lambda b: f"line {b.line}")
def test_every_usage_block_runs(pdfpool, block):
    module(f"usage_{block.line}", block, path_or_bytes=pdfs.simple(["awaited at top level"]))


def _defining(name: str) -> types.ModuleType:
    block = next(b for b in blocks("usage.md") if f"def {name}(" in b.body)
    return module(f"usage_{block.line}", block)


def test_usage_own_job_view_answers(pdfpool):
    view = _defining("thumbnails_view").thumbnails_view
    data = pdfs.simple(["thumbs"])
    request = RequestFactory().post("/", {"file": upload(data, "scan.pdf")})
    request.user = types.SimpleNamespace(is_authenticated=False)
    response = view(request)
    assert response.status_code == 200
    assert response.content == b'{"name": "scan.pdf", "bytes": %d}' % len(data)


def test_usage_report_names_the_caller_as_the_decorator_does(pdfpool):
    view = _defining("report").report
    request = RequestFactory().get("/", {"id": "7"}, REMOTE_ADDR="10.0.11.2")
    request.user = types.SimpleNamespace(is_authenticated=False)
    assert view(request).content == b'{"rows": 3}'
    from django_pdfpool import caller_of

    assert caller_of(request) == "ip:10.0.11.2"
    request.user = types.SimpleNamespace(is_authenticated=True, pk=42)
    assert caller_of(request) == "user:42"


def test_usage_first_page_job_runs(pdfpool):
    view = _defining("first_page").first_page
    request = RequestFactory().post("/", {"file": upload(pdfs.simple(["one", "two"]))})
    request.user = types.SimpleNamespace(is_authenticated=False)
    view(request)
    assert request.pdf.pages == ("one",) and request.pdf.page_count == 2


def test_usage_refusal_view_renders_its_template(pdfpool):
    refusal = _defining("pdf_refused").pdf_refused
    template = next(b for b in fences_of(DOCS / "usage.md").blocks if b.language == "html+django")
    loaders = [
        (
            "django.template.loaders.locmem.Loader",
            {
                "myapp/pdf_refused.html": template.body,
                "base.html": "<main>{% block content %}{% endblock %}</main>",
            },
        )
    ]
    engine = {"BACKEND": "django.template.backends.django.DjangoTemplates"}
    with override_settings(TEMPLATES=[{**engine, "OPTIONS": {"loaders": loaders}}]):
        response = refusal(RequestFactory().get("/"), CallerBusy("Busy.", 3.2))
    assert response.status_code == 429 and response["Retry-After"] == "4"
    assert b"Try again in about 3 seconds." in response.content


# --- the integrations' pages ---------------------------------------------------------


def test_the_drf_and_ninja_examples_decorate_at_import(pdfpool):
    drf = module("docs_drf", blocks("drf.md")[0])
    assert drf.ExtractView.post.pdfpool_view.field == "file"
    assert drf.extract_function.cls.post  # api_view made the view
    ninja = module("docs_ninja", blocks("ninja.md")[0])
    assert ninja.extract.pdfpool_view and ninja.extract_raw.pdfpool_view
