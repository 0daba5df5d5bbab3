"""The example's upload page in a real browser (Debian's chromium through Playwright),
served as `make demo` serves it. An upload shows its result and text; with the one
slot taken by another caller it shows "Queued", then "Extracting", then the result;
with the slot and the queue taken, the friendly refusal with its retry time, whose
button then works. Screenshots go to test-output/example-*.png."""

from __future__ import annotations

import hashlib
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest

from tests.e2e.test_example import prepare, serve
from tests.e2e.test_status_browser import OUTPUT
from tests.support import pdfs
from tests.support.pdfs import slow_pdf

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The demo with one slot and one queue place, so two other callers fill it."""
    state = tmp_path_factory.mktemp("demo-browser-state")
    prepare(state)
    with serve(state, SLOTS=1, QUEUE=1, WAIT=30) as running:
        yield running


@pytest.fixture
def others():
    """Threads for other callers' uploads (Playwright's loop owns the main thread)."""
    executor = ThreadPoolExecutor(4)
    yield executor
    executor.shutdown(wait=True)


def upload_from(executor: ThreadPoolExecutor, url: str, data: bytes, address: str) -> Future:
    """POST ``data`` to the API from ``address``: a caller other than the browser."""

    def post() -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(transport=transport, timeout=60) as client:
            files = {"file": ("other.pdf", data, "application/pdf")}
            headers = {"X-Requested-With": "test"}  # the example's API asks for it
            return client.post(url + "/api/extract/", files=files, headers=headers)

    return executor.submit(post)


def until_state(url: str, data: bytes, state: str, address: str, timeout: float = 15.0) -> None:
    """Wait until the job of ``data`` is in ``state``, as polls from its uploader's
    ``address`` see it (the example tells a caller of its own jobs only)."""
    digest = hashlib.sha256(data).hexdigest()
    deadline = time.monotonic() + timeout
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=10) as client:
        while client.get(f"{url}/api/jobs/{digest}/").json()["state"] != state:
            if time.monotonic() > deadline:
                raise AssertionError(f"the job did not become {state!r} in time")
            time.sleep(0.01)


def pick(page, name: str, data: bytes) -> None:
    page.set_input_files(
        "#id_file", files=[{"name": name, "mimeType": "application/pdf", "buffer": data}]
    )


def test_the_upload_page_queues_extracts_and_refuses_kindly(server, browser, others):
    from playwright.sync_api import expect

    OUTPUT.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1100, "height": 900}, color_scheme="light")
    page = context.new_page()
    requested, errors, failed = [], [], []
    page.on("request", lambda request: requested.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("response", lambda r: r.status >= 400 and failed.append((r.status, r.url)))
    page.goto(server.url + "/")
    result, progress = page.locator("#result"), page.locator("#progress-text")

    # 1. A PDF of two pages: its result, metadata and text, in place.
    pick(page, "two-pages.pdf", pdfs.simple(["First page text", "Second page text"], "A title"))
    page.click("button[type=submit]")
    expect(result.locator(".filename")).to_have_text("two-pages.pdf")
    expect(result.locator('[data-field="page_count"]')).to_have_text("2")
    expect(result.locator(".metadata")).to_contain_text("A title")
    expect(result.locator("details.page pre").first).to_have_text("First page text")
    expect(page.locator("#progress")).to_be_hidden()
    assert page.url == server.url + "/"  # no navigation: the script did it
    page.screenshot(path=OUTPUT / "example-result.png", full_page=True)

    # 2. The slot taken by another caller: queued, then extracting, then the result.
    holder = slow_pdf("holder", 2)
    held = upload_from(others, server.url, holder, "127.0.0.2")
    until_state(server.url, holder, "running", "127.0.0.2")
    pick(page, "waits.pdf", slow_pdf("waited for its turn", 1))
    page.click("button[type=submit]")
    expect(progress).to_contain_text("Queued: yours is next")
    expect(page.locator("#progress progress")).to_be_visible()
    expect(page.locator("button[type=submit]")).to_be_disabled()
    page.screenshot(path=OUTPUT / "example-queued.png")
    expect(progress).to_contain_text("Extracting", timeout=15_000)
    expect(result.locator(".filename")).to_have_text("waits.pdf", timeout=15_000)
    expect(result.locator("details.page pre").first).to_contain_text("waited for its turn")
    assert held.result(timeout=30).status_code == 200

    # 3. The slot and the queue taken: the friendly refusal, then a retry that works.
    holder = slow_pdf("holder again", 2)
    held = upload_from(others, server.url, holder, "127.0.0.2")
    until_state(server.url, holder, "running", "127.0.0.2")
    queued = pdfs.simple(["queued by another caller"])
    waiting = upload_from(others, server.url, queued, "127.0.0.3")
    until_state(server.url, queued, "queued", "127.0.0.3")
    pick(page, "refused.pdf", pdfs.simple(["Refused at first, then read"]))
    page.click("button[type=submit]")
    problem = page.locator(".problem.busy")
    expect(problem.locator("h2")).to_have_text("Busy: please try again shortly")
    expect(problem).to_contain_text("The server is busy with other PDFs")
    expect(problem.locator("p.retry")).to_have_text(re.compile(r"Try again in \d+ seconds?\."))
    expect(problem.locator("button.retry")).to_be_disabled()
    expect(result).to_have_count(0)
    page.screenshot(path=OUTPUT / "example-refused.png")
    assert held.result(timeout=30).status_code == 200
    assert waiting.result(timeout=30).status_code == 200
    expect(problem.locator("button.retry")).to_be_enabled(timeout=20_000)
    expect(problem.locator("p.retry")).to_have_text("You can try again now.")
    problem.locator("button.retry").click()
    expect(result.locator(".filename")).to_have_text("refused.pdf")
    expect(result.locator("details.page pre").first).to_have_text("Refused at first, then read")

    overflow = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    assert page.evaluate(overflow) == 0
    dark = browser.new_context(viewport={"width": 420, "height": 900}, color_scheme="dark")
    narrow = dark.new_page()
    narrow.goto(server.url + "/")
    pick(narrow, "narrow.pdf", pdfs.simple(["A narrow, dark window"], "Dark"))
    narrow.click("button[type=submit]")
    expect(narrow.locator("#result details.page pre")).to_have_text("A narrow, dark window")
    assert narrow.evaluate(overflow) == 0
    narrow.screenshot(path=OUTPUT / "example-narrow-dark.png", full_page=True)

    assert failed == [(503, server.url + "/api/extract/")]  # the refusal, and nothing else
    assert [e for e in errors if "status of 503" not in e] == []  # the browser logs it
    assert [url for url in requested if not url.startswith(server.url)] == []


def test_without_javascript_the_form_still_answers_on_the_page(server, browser, others):
    from playwright.sync_api import expect

    page = browser.new_context(java_script_enabled=False).new_page()
    page.goto(server.url + "/")
    pick(page, "plain.pdf", pdfs.simple(["Sent without a script"]))
    page.click("button[type=submit]")
    expect(page.locator("#result .filename")).to_have_text("plain.pdf")
    expect(page.locator("#result details.page pre")).to_have_text("Sent without a script")

    holder = slow_pdf("holder, no script", 2)
    held = upload_from(others, server.url, holder, "127.0.0.2")
    until_state(server.url, holder, "running", "127.0.0.2")
    queued = pdfs.simple(["queued, no script"])
    waiting = upload_from(others, server.url, queued, "127.0.0.3")
    until_state(server.url, queued, "queued", "127.0.0.3")
    pick(page, "plain.pdf", pdfs.simple(["Refused without a script"]))
    page.click("button[type=submit]")
    problem = page.locator(".problem.busy")
    expect(problem.locator("h2")).to_have_text("Busy: please try again shortly")
    expect(problem.locator("p.retry")).to_contain_text(re.compile(r"Try again in \d+ seconds?"))
    expect(page.locator("#upload-form")).to_be_visible()
    page.screenshot(path=OUTPUT / "example-refused-no-js.png")
    assert held.result(timeout=30).status_code == 200
    assert waiting.result(timeout=30).status_code == 200


def test_the_upload_page_declares_the_files_sha256(server, browser):
    """The page hashes the file with Web Crypto and declares it (``Pdf-Digest``), so the
    door can let a joiner in and refuse what cannot join before the body."""
    from django_pdfpool.record import format_digest

    data = pdfs.simple(["declared by the browser"])
    page = browser.new_context().new_page()
    posted = []
    page.on("request", lambda request: request.method == "POST" and posted.append(request))
    page.goto(server.url + "/")
    pick(page, "declared.pdf", data)
    page.click("button[type=submit]")
    page.locator("#result .filename").wait_for()
    (request,) = posted
    assert request.headers["pdf-digest"] == format_digest(hashlib.sha256(data).hexdigest())
    page.context.close()


def test_the_script_counts_characters_as_the_server_does(server, browser):
    """A character beyond the BMP (an emoji) is one character on the page whether the
    script or the server rendered it, not JavaScript's two UTF-16 code units."""
    data = pdfs.text_bomb(chars=7)  # one page of seven U+1F4A3
    counts = []
    for script in (True, False):
        page = browser.new_context(java_script_enabled=script).new_page()
        page.goto(server.url + "/")
        pick(page, "emoji.pdf", data)
        page.click("button[type=submit]")
        result = page.locator("#result")
        result.locator(".filename").wait_for()
        total = result.locator('[data-field="characters"]').inner_text()
        counts.append((total, result.locator("details.page summary .muted").inner_text()))
        page.context.close()
    assert counts == [("7", "· 7 characters")] * 2


def truncation_notes(browser, url: str, data: bytes) -> list[str]:
    """The result's note on a cut extraction, shown by the script, then without it."""
    notes = []
    for script in (True, False):
        page = browser.new_context(java_script_enabled=script).new_page()
        page.goto(url + "/")
        pick(page, "cut.pdf", data)
        page.click("button[type=submit]")
        result = page.locator("#result")
        result.locator(".filename").wait_for(timeout=30_000)
        notes.append(result.locator(".note").inner_text())
        page.context.close()
    return notes


def test_a_cut_extraction_names_the_limit_that_cut_it(server, browser, tmp_path):
    """A one-page PDF whose text passes MAX_TEXT_BYTES (8 MiB) was cut by the text limit,
    not "only the first 1 pages" by a page limit; one page reads in the singular."""
    long_text = pdfs.text_bomb(chars=(8 << 20) // 4 + 4096)  # 4 bytes of UTF-8 each
    text_note = "The text stops at the server's limit on text: the rest was not extracted."
    assert truncation_notes(browser, server.url, long_text) == [text_note] * 2
    prepare(tmp_path)
    with serve(tmp_path, MAX_PAGES=1) as one_page:
        two_pages = pdfs.simple(["one", "two"])
        page_note = "Only 1 page extracted (the server's page limit)."
        assert truncation_notes(browser, one_page.url, two_pages) == [page_note] * 2
