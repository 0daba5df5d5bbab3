"""The code in the docs, run. Every Python and shell block of README.md and docs/ runs unless
the line before it says ``<!-- not run: why -->``: each Python block as a module (imports,
decorators: a misplaced one fails at import), each shell block with bash in the repository.
The quickstart's and usage.md's views then answer real requests through Django's test
client, with real extraction; the MIDDLEWARE lists keep Django's order with the door last."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import django
import pytest
from django.test import Client, RequestFactory, override_settings

from django_pdfpool import get_pool
from django_pdfpool.exceptions import CallerBusy, ExtractionError, PoolMisconfigured
from django_pdfpool.responses import describe
from tests.support import pdfs
from tests.test_decorators import upload
from tests.test_docs import Block, fences_of

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


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
        unreadable = refusal(RequestFactory().get("/"), ExtractionError("not_a_pdf"))
        secret = PoolMisconfigured("Another deployment uses the Redis namespace 'x'.", 5.0)
        misconfigured = refusal(RequestFactory().get("/"), secret)
    assert response.status_code == 429 and response["Retry-After"] == "4"
    assert b"Try again in about 4 seconds." in response.content
    # the message a client is told is the library's own: no code prefix, no operator detail
    assert unreadable.status_code == 422 and "Retry-After" not in unreadable
    assert b"<p>This file is not a PDF.</p>" in unreadable.content
    assert misconfigured.status_code == 503 and b"namespace" not in misconfigured.content
    assert describe(secret).message.encode() in misconfigured.content


# --- the integrations' pages ---------------------------------------------------------


def test_the_drf_and_ninja_examples_decorate_at_import(pdfpool):
    drf = module("docs_drf", blocks("drf.md")[0])
    assert drf.ExtractView.post.pdfpool_view.field == "file"
    assert drf.extract_function.cls.post  # api_view made the view
    ninja = module("docs_ninja", blocks("ninja.md")[0])
    assert ninja.extract.pdfpool_view and ninja.extract_raw.pdfpool_view


# --- every block meant to run --------------------------------------------------------------

NOT_RUN = re.compile(r"^<!-- not run: \S.* -->$")
SHELL = {"sh", "bash", "shell"}
RUNNABLE = {"python", "py"} | SHELL
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# what a settings fragment or an example may use without defining it
GIVEN = {"INSTALLED_APPS": [], "MIDDLEWARE": [], "BASE_DIR": Path("/srv")}


def not_run(lines: list[str], block: Block) -> bool:
    """Whether the last line before ``block``'s fence (blank lines aside) marks it."""
    before = [line for line in lines[: block.line - 1] if line.strip()]
    return bool(before) and bool(NOT_RUN.match(before[-1].strip()))


def runnable_blocks() -> list[tuple[str, Block]]:
    """(page:line, block) for each Python and shell block meant to run. Titled blocks are a
    project's files, run by the test of their page (the quickstart's, test_wheel)."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for block in fences_of(page).blocks:
            if block.language in RUNNABLE and not block.title and not not_run(lines, block):
                found.append((f"{page.name}:{block.line}", block))
    return found


@pytest.mark.parametrize("where,block", runnable_blocks(), ids=lambda value: str(value)[:40])
def test_every_block_meant_to_run_runs(pdfpool, where, block):
    if block.language in SHELL:
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": bin_dir + os.pathsep + os.environ["PATH"],
            "PYTHONPATH": str(ROOT),
        }
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.body],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return
    names = {**GIVEN, "path_or_bytes": pdfs.simple(["awaited at top level"])}
    module(f"docs_{where.replace('.', '_').replace(':', '_')}", block, **names)


def test_a_marked_block_is_left_out_and_an_unmarked_one_is_not():
    text = "A\n\n<!-- not run: needs a server -->\n\n```sh\ncurl x\n```\n\n```sh\nls\n```\n"
    lines, found = text.splitlines(), fences_of_text(text).blocks
    assert [not_run(lines, block) for block in found] == [True, False]


def fences_of_text(text: str):
    from tests.test_docs import read_fences

    return read_fences(text)


# --- one middleware position ---------------------------------------------------------------

DOOR = "django_pdfpool.middleware.AdmissionMiddleware"
JSON = "application/json"


def djangos_default_middleware() -> list[str]:
    """MIDDLEWARE as `django-admin startproject` writes it."""
    template = Path(django.__file__).parent / "conf" / "project_template" / "project_name"
    tree = ast.parse((template / "settings.py-tpl").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "MIDDLEWARE":
            return [ast.literal_eval(item) for item in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("no MIDDLEWARE in Django's project template")


def middleware_lists() -> list[tuple[str, list[str]]]:
    """(page:line, the names) of every MIDDLEWARE list in the docs that holds the door."""
    found = []
    for page in PAGES:
        for block in fences_of(page).blocks:
            if block.language not in {"python", "py"} or DOOR not in block.body:
                continue
            for node in ast.walk(_parsed(block)):
                if (
                    isinstance(node, ast.Assign)
                    and getattr(node.targets[0], "id", "") == "MIDDLEWARE"
                ):
                    names = [
                        item.value
                        for item in node.value.elts  # type: ignore[attr-defined]
                        if isinstance(item, ast.Constant) and isinstance(item.value, str)
                    ]
                    found.append((f"{page.name}:{block.line}", names))
    return found


def _parsed(block: Block) -> ast.Module:
    return ast.parse(block.body)


def in_order(names: list[str]) -> bool:
    """The door last, and Django's own middleware in Django's order."""
    default = djangos_default_middleware()
    django_names = [name for name in names if name in default]
    return names[-1] == DOOR and django_names == sorted(django_names, key=default.index)


def test_every_middleware_list_keeps_djangos_order_with_the_door_last():
    lists = middleware_lists()
    pages = {where.split(":")[0] for where, _ in lists}
    assert pages >= {"installation.md", "README.md", "door.md"}
    assert [(where, names) for where, names in lists if not in_order(names)] == []


def test_the_order_check_catches_the_door_above_csrf():
    default = djangos_default_middleware()
    moved = [*default[:3], DOOR, *default[3:]]  # above CsrfViewMiddleware
    assert not in_order(moved) and in_order([*default, DOOR])


def test_with_the_documented_order_the_door_answers_before_csrf_reads_the_body(pdfpool, settings):
    """installation.md's list, CSRF enforced, a CSRF cookie but no token: the closed pool's 503
    comes from the door, before CsrfViewMiddleware reads the form (which would answer 403:
    the control, pool open). Without the cookie, Django's 403 from the headers, door or not."""
    (listed,) = [names for where, names in middleware_lists() if where.startswith("installation")]
    settings.MIDDLEWARE = listed
    client = Client(
        enforce_csrf_checks=True, REMOTE_ADDR="10.0.11.9", HTTP_ACCEPT="application/json"
    )
    form = {"file": upload(pdfs.simple(["csrf after the door"]))}
    no_cookie = client.post("/sync/", form)
    client.cookies["csrftoken"] = "A" * 32
    assert client.post("/sync/", form).status_code == 403  # the control: CSRF refuses
    get_pool().close()
    refused = client.post("/sync/", form)
    assert refused.status_code == 503 and refused.json()["error"] == "closed"
    del client.cookies["csrftoken"]
    closed_no_cookie = client.post("/sync/", form)
    assert no_cookie.status_code == closed_no_cookie.status_code == 403
    assert closed_no_cookie.content == no_cookie.content


# --- installing before a release ------------------------------------------------------------

INSTALL_PAGES = [ROOT / "README.md", DOCS / "installation.md", DOCS / "quickstart.md"]


def pip_lines(page: Path) -> list[str]:
    """The `pip ...` lines of the page's shell blocks, comments cut."""
    return [
        line.split("#")[0].strip()
        for block in fences_of(page).blocks
        if block.language in SHELL
        for line in block.body.splitlines()
        if line.strip().startswith("pip ")
    ]


@pytest.mark.parametrize("page", INSTALL_PAGES, ids=lambda page: page.name)
def test_the_install_commands_name_a_clone_or_a_wheel_until_a_release(page):
    lines = pip_lines(page)
    assert lines, f"{page.name} says nowhere how to install"
    for line in lines:
        target = shlex.split(line)[-1]
        assert target.startswith(("./", "../", "dist/")), line
    prose = " ".join(page.read_text().split())
    for said in re.finditer(r"`pip install django-pdfpool`", prose):
        assert "once" in prose[max(0, said.start() - 60) : said.end() + 60].lower(), "unreleased"


def test_the_documented_wheel_build_makes_a_wheel(tmp_path):
    (line,) = [line for line in pip_lines(DOCS / "installation.md") if line.startswith("pip wheel")]
    words = [str(ROOT) if w == "./django-pdfpool" else w for w in shlex.split(line)]
    words = [str(tmp_path) if w == "dist" else w for w in words]
    done = subprocess.run(
        [sys.executable, "-m", *words, "--quiet"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in tmp_path.glob("django_pdfpool-*.whl")], "no wheel built"
