"""The example project end to end, served as `make demo` serves it (uvicorn, the same app,
example_project/ as the working directory) on a free port, with its state (SQLite database,
secret key, admin password) in a temporary directory: uploads through the HTML form and
the JSON API, refusals, the job state the page polls, the admin, and a graceful stop."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from django.utils.html import escape
from pypdf import PdfReader

from tests.support import pdfs
from tests.support.pdfs import slow_pdf
from tests.support.servers import Server, uvicorn

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "example_project"
APP = "demo.asgi:application"  # what `make demo` serves
CORPUS = ROOT.parent / "shared" / "corpus"
POOL_KEYS = ["SLOTS", "QUEUE", "WAIT", "TIMEOUT", "MEMORY_LIMIT", "MAX_UPLOAD_SIZE"]
POOL_KEYS += ["MAX_PAGES", "ENGINE", "WARM_CHILDREN", "CHILD_NICE", "TEMP_DIR", "DOOR"]
POOL_KEYS += ["DOOR_DIGESTS", "DOOR_BUDGET", "DOOR_BODY_TIMEOUT", "DOOR_BODY_MIN_RATE"]
FIELDS = [
    "sha256",
    "page_count",
    "pages",
    "metadata",
    "truncated",
    "text_truncated",
    "elapsed",
    "peak_rss",
]
JSON = {"accept": "application/json"}


def demo_env(state: Path, **pool: object) -> dict[str, str]:
    """The environment `make demo` would run in, with the state in ``state`` and
    ``PDFPOOL_<KEY>`` for ``pool`` (any inherited PDFPOOL_* emptied, so ignored)."""
    env = {f"PDFPOOL_{key}": "" for key in POOL_KEYS}
    env.update({f"PDFPOOL_{key}": str(value) for key, value in pool.items()})
    # pytest-django exported the suite's settings module; the demo names its own.
    return {**env, "DEMO_STATE_DIR": str(state), "DJANGO_SETTINGS_MODULE": "demo.settings"}


def manage(state: Path, *args: str, **pool: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env={**os.environ, **demo_env(state, **pool)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def prepare(state: Path) -> subprocess.CompletedProcess[str]:
    """`make demo`'s steps before serving: migrate, then the admin user."""
    migrated = manage(state, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    admin = manage(state, "ensure_demo_admin", "--base-url", "http://127.0.0.1:8000")
    assert admin.returncode == 0, admin.stderr
    return admin


@contextmanager
def serve(state: Path, **pool: object) -> Iterator[Server]:
    with uvicorn(app=APP, cwd=PROJECT, env=demo_env(state, **pool)) as server:
        yield server


def sign_in_line(output: str) -> tuple[str, str]:
    match = re.search(r"Admin sign-in:\s+(\S+) / (\S+)", output)
    assert match, output
    return match[1], match[2]


def csrf_token(page: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match, "no CSRF token in the page"
    return match[1]


def form_post(client: httpx.Client, url: str, data: bytes, name: str = "doc.pdf"):
    """Send the upload form as a browser without JavaScript does: GET the page (CSRF
    cookie and token), then POST the multipart form to it."""
    token = csrf_token(client.get(url + "/").text)
    return client.post(
        url + "/",
        data={"csrfmiddlewaretoken": token},
        files={"file": (name, data, "application/pdf")},
    )


SCRIPT = {"x-requested-with": "test"}  # the example's API refuses POSTs without it


def api_post(client: httpx.Client, url: str, data: bytes, **extra: dict) -> httpx.Response:
    headers = {**SCRIPT, **extra.pop("headers", {})}
    files = {"file": ("doc.pdf", data, "application/pdf")}
    return client.post(url + "/api/extract/", files=files, headers=headers, **extra)


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """A migrated demo state, and what `ensure_demo_admin` printed on its first run."""
    directory = tmp_path_factory.mktemp("demo-state")
    first = prepare(directory)
    return directory, first.stdout


@pytest.fixture(scope="module")
def server(state):
    with serve(state[0]) as running:
        yield running


@pytest.fixture
def client():
    with httpx.Client(timeout=60) as client:
        yield client


# --- setup, as `make demo` does it -----------------------------------------------


def test_the_admin_password_is_generated_once_then_reused(state):
    directory, first = state
    assert "Created the admin user 'admin'" in first
    username, password = sign_in_line(first)
    assert username == "admin" and len(password) >= 20
    stored = directory / ".admin_password"
    assert stored.read_text().strip() == password
    assert stored.stat().st_mode & 0o077 == 0 and (directory / ".secret_key").exists()
    again = prepare(directory)  # a second `make demo`
    assert "Created" not in again.stdout and "exists" in again.stdout
    assert sign_in_line(again.stdout) == (username, password)
    other = prepare(directory.parent / "other-state")
    assert sign_in_line(other.stdout)[1] != password  # generated, not fixed


def test_a_new_state_dir_is_made_with_a_secret_key_from_the_environment(tmp_path, monkeypatch):
    """DEMO_STATE_DIR is created on first use whether or not DJANGO_SECRET_KEY is given
    (it was made only while writing a generated key: migrate could not open the database)."""
    monkeypatch.setenv("DJANGO_SECRET_KEY", "a key of the operator's own, not generated here")
    state = tmp_path / "new" / "state"
    admin = prepare(state)
    assert sign_in_line(admin.stdout)[0] == "admin"
    assert (state / "db.sqlite3").exists() and not (state / ".secret_key").exists()


def test_deploy_checks_silence_only_the_middleware_the_example_has(state):
    """The security, CSRF and clickjacking middleware are Django's, subclassed
    (demo.middleware), so `check --deploy` must not say they are missing."""
    deploy = manage(state[0], "check", "--deploy")
    assert deploy.returncode == 0, deploy.stderr
    assert not {"security.W001", "security.W002", "security.W003"} & set(
        re.findall(r"security\.W\d+", deploy.stderr)
    )
    script = (
        "from django.conf import settings; from django.utils.module_loading import import_string;"
        "from django.middleware import clickjacking, csrf, security;"
        "ours = [import_string(path) for path in settings.MIDDLEWARE];"
        "django = (security.SecurityMiddleware, csrf.CsrfViewMiddleware,"
        " clickjacking.XFrameOptionsMiddleware);"
        "print(all(any(issubclass(c, d) for c in ours) for d in django))"
    )
    read = manage(state[0], "shell", "--verbosity=0", "-c", script)
    assert read.stdout.split() == ["True"], read.stderr


def test_pool_settings_come_from_the_environment_and_are_checked(state):
    directory = state[0]
    read = manage(
        directory,
        "shell",
        "--verbosity=0",
        "-c",
        "from django.conf import settings; import json; print(json.dumps(settings.PDFPOOL))",
        SLOTS=1,
        QUEUE=0,
        WAIT="none",
        TIMEOUT=7.5,
        MEMORY_LIMIT="256M",
        DOOR_BUDGET=3,
    )
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout.splitlines()[-1]) == {
        "SLOTS": 1,
        "QUEUE": 0,
        "WAIT": None,
        "TIMEOUT": 7.5,
        "MEMORY_LIMIT": 256 << 20,
        "DOOR": {"BUDGET": 3},
    }
    bad = manage(directory, "check", SLOTS=0, WAIT="soon")
    assert bad.returncode != 0
    assert "PDFPOOL['SLOTS'] must be an integer >= 1 and <= 2**53, not 0" in bad.stderr
    assert "PDFPOOL['WAIT'] must be seconds >= 0 and <= 1e9, or None, not 'soon'" in bad.stderr


# --- uploads ---------------------------------------------------------------------


def test_a_generated_pdf_through_the_html_form(server, client):
    data = pdfs.simple(["Hello from the form", "Second <page> & more"], title="Form test")
    response = form_post(client, server.url, data, name="form-test.pdf")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "form-test.pdf" in page
    assert "<pre>Hello from the form</pre>" in page
    assert f"<pre>{escape('Second <page> & more')}</pre>" in page
    assert 'data-field="page_count">2<' in page
    assert '<th scope="row">Title</th><td>Form test</td>' in page
    assert hashlib.sha256(data).hexdigest() in page


def test_a_generated_pdf_through_the_api(server, client):
    data = pdfs.simple(["Hello from the API", "Page two"], title="API test")
    response = api_post(client, server.url, data)
    assert response.status_code == 200
    body = response.json()
    assert list(body) == FIELDS
    assert body["pages"] == ["Hello from the API", "Page two"]
    joined = api_post(client, server.url, data, params={"text": "1"})  # the text once
    assert list(joined.json()) == [f if f != "pages" else "text" for f in FIELDS]
    assert joined.json()["text"] == "Hello from the API\n\nPage two"
    assert (body["page_count"], body["truncated"]) == (2, False)
    assert body["metadata"]["Title"] == "API test"
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["elapsed"] > 0 and body["peak_rss"] > 0


def test_the_api_answers_json_whatever_the_client_accepts(server, client):
    html = {"headers": {"accept": "text/html"}}
    unreadable = api_post(client, server.url, b"just some text", **html)
    assert unreadable.status_code == 422
    assert unreadable.json() == {"error": "not_a_pdf", "message": "This file is not a PDF."}
    missing = client.post(
        server.url + "/api/extract/", data={"x": "1"}, headers={**SCRIPT, "accept": "text/html"}
    )
    assert missing.status_code == 400 and missing.json()["error"] == "no_upload"
    get = client.get(server.url + "/api/extract/", **html)
    assert get.status_code == 405 and get.json()["error"] == "method_not_allowed"


def test_the_form_shows_an_unreadable_file_on_the_page(server, client):
    response = form_post(client, server.url, b"just some text")
    assert response.status_code == 422
    page = response.text
    assert 'id="upload-form"' in page  # the page itself, ready for another try
    assert "<h2>This PDF cannot be read</h2>" in page
    assert "This file is not a PDF." in page


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_a_corpus_pdf_through_the_form_and_the_api(server, client):
    path = CORPUS / "004-pdflatex-4-pages" / "pdflatex-4-pages.pdf"
    expected = [page.extract_text() for page in PdfReader(path).pages]
    data = path.read_bytes()
    body = api_post(client, server.url, data).json()
    assert body["page_count"] == 4 and body["pages"] == expected
    assert body["metadata"]["Producer"] == "pdfTeX-1.40.23"
    page = form_post(client, server.url, data, name=path.name).text
    assert 'data-field="page_count">4<' in page
    for text in expected:
        assert f"<pre>{escape(text)}</pre>" in page
    encrypted = CORPUS / "005-libreoffice-writer-password" / "libreoffice-writer-password.pdf"
    refused = api_post(client, server.url, encrypted.read_bytes())
    assert refused.status_code == 422 and refused.json()["error"] == "encrypted"


def test_static_files_and_the_admin_status_page(server, state, client):
    for path in [
        "/static/uploads/demo.css",
        "/static/uploads/upload.js",
        "/static/admin/css/base.css",
        "/static/django_pdfpool/status.js",
    ]:
        assert client.get(server.url + path).status_code == 200, path
    # the admin's pages name no icon: the browser asks for /favicon.ico (a 404 in the log)
    icon = client.get(server.url + "/favicon.ico", follow_redirects=True)
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    username, password = sign_in_line(state[1])
    login = server.url + "/admin/login/"
    token = csrf_token(client.get(login).text)
    signed_in = client.post(
        login,
        data={"csrfmiddlewaretoken": token, "username": username, "password": password},
        headers={"referer": login},
    )
    assert signed_in.status_code == 302
    status = client.get(server.url + "/admin/django_pdfpool/poolstatus/?format=json")
    assert status.status_code == 200 and status.json()["slots"] == 2


# --- a full pool -------------------------------------------------------------------


def addressed(address: str) -> httpx.AsyncClient:
    """A client whose requests come from ``address``: another anonymous caller."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(transport=transport, timeout=60)


async def job_state(client: httpx.AsyncClient, url: str, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    return (await client.get(f"{url}/api/jobs/{digest}/")).json()


async def until_state(client: httpx.AsyncClient, url: str, data: bytes, state: str) -> dict:
    async with asyncio.timeout(15):  # did not hang
        while (found := await job_state(client, url, data))["state"] != state:
            await asyncio.sleep(0.02)
    return found


def test_the_page_describes_a_pool_without_a_queue(state):
    """QUEUE=0 (settings.md: 503 at once): not "lets 0 more wait for a turn"."""
    with serve(state[0], SLOTS=1, QUEUE=0) as running:
        page = " ".join(httpx.get(running.url + "/", timeout=30).text.split())
    assert "This server runs 1 extraction at a time and turns the next away at once." in page


def test_a_full_pool_queues_then_refuses_with_a_retry_time(state):
    held, queued, turned_away = slow_pdf("held", 2), pdfs.simple(["queued"]), pdfs.simple(["no"])

    async def scenario(url: str) -> None:
        async with (
            addressed("127.0.0.2") as a,
            addressed("127.0.0.3") as b,
            addressed("127.0.0.4") as c,
        ):
            holding = asyncio.create_task(api_post_async(a, url, held))
            running = await until_state(a, url, held, "running")
            assert running["running"] == 1 and running["slots"] == 1
            # with a place free the door lets it in, and the pool's caller rule answers
            mine = await api_post_async(a, url, pdfs.simple(["another of mine"]))
            assert mine.status_code == 429 and mine.json()["error"] == "caller_busy"
            waiting = asyncio.create_task(api_post_async(b, url, queued))
            assert (await until_state(b, url, queued, "queued"))["ahead"] == 0
            assert (await job_state(c, url, queued))["state"] == "none"  # not c's job

            busy = await api_post_async(c, url, turned_away)
            assert busy.status_code == 503
            assert busy.json()["error"] == "busy"
            assert busy.json()["retry_after"] == int(busy.headers["retry-after"]) >= 1

            token = csrf_token((await c.get(url + "/")).text)
            page = await c.post(
                url + "/",
                data={"csrfmiddlewaretoken": token},
                files={"file": ("doc.pdf", turned_away, "application/pdf")},
            )
            assert page.status_code == 503 and int(page.headers["retry-after"]) >= 1
            assert 'id="upload-form"' in page.text
            assert "<h2>Busy: please try again shortly</h2>" in page.text
            assert f"Try again in <strong>{page.headers['retry-after']} second" in page.text

            done, after = await holding, await waiting
            assert done.status_code == 200 and done.json()["pages"][0].startswith("held")
            assert after.status_code == 200 and after.json()["pages"] == ["queued"]
            assert (await job_state(c, url, held))["state"] == "none"

    with serve(state[0], SLOTS=1, QUEUE=1, WAIT=30) as tight:
        asyncio.run(scenario(tight.url))


async def api_post_async(client: httpx.AsyncClient, url: str, data: bytes) -> httpx.Response:
    files = {"file": ("doc.pdf", data, "application/pdf")}
    return await client.post(url + "/api/extract/", files=files, headers={**JSON, **SCRIPT})


def sign_in(client, url: str, state) -> None:
    """Sign ``client`` in as the demo's admin (staff)."""
    username, password = sign_in_line(state[1])
    login = url + "/admin/login/"
    token = csrf_token(client.get(login).text)
    data = {"csrfmiddlewaretoken": token, "username": username, "password": password}
    assert client.post(login, data=data, headers={"referer": login}).status_code == 302


def test_the_job_state_tells_a_caller_of_its_own_job_only(server, state, client):
    data = slow_pdf("whose job", 2)

    async def scenario() -> None:
        async with addressed("127.0.0.6") as mine, addressed("127.0.0.7") as other:
            request = asyncio.create_task(api_post_async(mine, server.url, data))
            running = await until_state(mine, server.url, data, "running")
            assert running["running_for"] >= 0
            assert await job_state(other, server.url, data) == {
                "state": "none",
                "slots": 2,
                "running": 1,
                "queued": 0,
            }  # another caller learns nothing of this document
            staff = await asyncio.to_thread(staff_state)
            assert staff["state"] == "running"  # staff see every job
            assert (await request).status_code == 200

    def staff_state() -> dict:
        sign_in(client, server.url, state)
        digest = hashlib.sha256(data).hexdigest()
        return client.get(f"{server.url}/api/jobs/{digest}/").json()

    asyncio.run(scenario())


def test_the_api_refuses_a_post_another_site_could_make_a_browser_send(server, client):
    data = pdfs.simple(["cross-site"])
    files = {"file": ("doc.pdf", data, "application/pdf")}
    forged = client.post(
        server.url + "/api/extract/", files=files, headers={"origin": "https://evil.example"}
    )
    assert forged.status_code == 403 and forged.json()["error"] == "header_required"
    assert api_post(client, server.url, data).status_code == 200  # scripts send the header


def test_sigterm_lets_the_extraction_in_flight_finish(state):
    data = slow_pdf("in flight", 1)

    async def scenario(server: Server) -> httpx.Response:
        async with addressed("127.0.0.5") as client:
            request = asyncio.create_task(api_post_async(client, server.url, data))
            await until_state(client, server.url, data, "running")
            server.process.send_signal(signal.SIGTERM)
            return await request

    with serve(state[0], SLOTS=1) as server:
        response = asyncio.run(scenario(server))
        # uvicorn shuts down gracefully, then ends by the signal it caught
        assert server.process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert response.status_code == 200 and response.json()["pages"][0].startswith("in flight")
    log = server.text()
    assert "Application shutdown complete." in log and "Finished server process" in log
    assert "drain timed out" not in log and "Traceback" not in log
