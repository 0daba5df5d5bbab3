"""The memory envelope on the status page, in Debian's chromium: what the process may use and
why, SLOTS x MEMORY_LIMIT, the server's and its children's RSS, and a finished job's peak,
kept current by the page's own refresh."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from django_pdfpool.sandbox import extract as extraction
from django_pdfpool.status.envelope import memory_allowed
from django_pdfpool.status.page import fmt
from tests.support import hungry
from tests.support.sandbox import run

URL = "/admin/django_pdfpool/poolstatus/"
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_page_shows_the_envelope_and_a_jobs_peak(pdfpool, live_server, operator, browser):
    from playwright.sync_api import expect

    pdfpool(SLOTS=2, MEMORY_LIMIT=256 << 20)
    extraction.register_engine(hungry.ENGINE)
    with ThreadPoolExecutor(1) as thread:  # off the main thread: Playwright runs a loop there
        thread.submit(run, hungry.document(64, "browser"), engine=hungry.ENGINE).result(60)
    page = browser.new_context().new_page()
    page.goto(live_server.url + URL)
    page.fill("#id_username", "operator")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(URL) + "$"))
    memory = page.locator("#pdfpool-memory")
    allowed, source = memory_allowed()
    expect(memory.locator("tr", has_text="May use")).to_contain_text(
        f"{fmt(allowed, 'bytes')} ({source})"
    )
    expect(memory.locator('[data-field="memory.pool"]')).to_have_text("512 MiB")
    for field in ("memory.server_rss", "memory.children_rss"):
        expect(memory.locator(f'[data-field="{field}"]')).to_have_text(
            re.compile(r"\d+ (B|KiB|MiB|GiB)")
        )
    newest = page.locator("#pdfpool-peaks tr").first.locator("td")
    expect(newest.nth(1)).to_have_text(re.compile(r"\d+ (MiB|GiB)"))
    assert int(newest.nth(1).inner_text().split()[0]) >= 64 or "GiB" in newest.nth(1).inner_text()
    expect(page.locator("#pdfpool-status")).to_have_attribute("data-updates", re.compile(r"[1-9]"))
    expect(memory.locator('[data-field="memory.pool"]')).to_have_text("512 MiB")  # refreshed
    OUTPUT.mkdir(exist_ok=True)
    memory.screenshot(path=OUTPUT / "status-memory.png")


def test_whether_the_pool_fits_follows_the_refresh(pdfpool, live_server, operator, browser):
    """SLOTS x MEMORY_LIMIT grown past what the process may use: the refresh flags it beside
    the new figure, as a reload would."""
    from playwright.sync_api import expect

    allowed, _ = memory_allowed()
    if not allowed:
        pytest.skip("no /proc/meminfo: nothing to fit in")
    limit = 128 << 20
    pdfpool(SLOTS=1, MEMORY_LIMIT=limit)
    page = browser.new_context().new_page()
    page.goto(live_server.url + URL)
    page.fill("#id_username", "operator")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(URL) + "$"))
    row = page.locator("#pdfpool-memory tr", has_text="Slots x memory limit")
    expect(row).not_to_contain_text("over that")
    slots = allowed // limit + 1
    pdfpool(SLOTS=slots, MEMORY_LIMIT=limit)
    expect(row.locator('[data-field="memory.pool"]')).to_have_text(fmt(slots * limit, "bytes"))
    expect(row).to_contain_text("with the server, over that")
