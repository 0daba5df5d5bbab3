"""The status page in a real browser: Debian's chromium, driven by Playwright, logs into
the admin of a live test server, watches the page refresh itself while jobs are held,
and saves screenshots under test-output/ (and docs/images/status.png when
PDFPOOL_UPDATE_SCREENSHOT=1)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from django_pdfpool import configured, get_pool
from django_pdfpool.admission import history
from django_pdfpool.status import page as status_page
from tests.conftest import wait_until
from tests.project.views import HELD
from tests.test_decorators import held_key, post

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"
URL = "/admin/django_pdfpool/poolstatus/"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
pytest_plugins = ["tests.support.redis_fixtures"]


@pytest.fixture
def threads():
    """Threads for held requests; on the way out (even a failing one) the held jobs go."""
    executor = ThreadPoolExecutor(12)
    yield executor
    HELD.release.set()
    executor.shutdown(wait=True)


@pytest.fixture
def fast_history(monkeypatch):
    """A recorder sampling 25 times a second, so a test of seconds fills the chart
    (its window, 8 s, is what the chart says it shows)."""
    recorder = history.Recorder(configured.peek_pool, interval=0.04, size=200)
    monkeypatch.setattr(status_page, "recorder", recorder)
    recorder.start()
    yield recorder
    recorder.stop()


def run_quick_jobs(threads: ThreadPoolExecutor) -> None:
    """Some finished work for the counters and figures: jobs that complete, one that fails."""

    async def job(seconds: float, fail: bool = False):
        await asyncio.sleep(seconds)
        if fail:
            raise ValueError("a failing job, for the failed counter")

    def run(index: int, seconds: float, fail: bool = False):
        with contextlib.suppress(ValueError):
            asyncio.run(
                get_pool().run(
                    f"quick:{index:064x}", f"ip:10.9.0.{index}", lambda: job(seconds, fail)
                )
            )

    durations = [0.15, 0.3, 0.2, 0.45, 0.25, 0.35]
    for wave in (range(3), range(3, 6)):  # within 2 slots + 3 queued: none refused
        futures = [threads.submit(run, i, durations[i], i == 3) for i in wave]
        for done in futures:
            done.result(timeout=10)


def sign_in(page, url: str) -> None:
    page.goto(url + URL)  # the admin sends us to its login form
    page.fill("#id_username", "operator")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(URL) + "$"))


def test_a_process_whose_lease_ended_reads_ended_after_a_refresh(
    pdfpool, live_server, operator, browser, redis_server, namespace
):
    """A process stopped while it holds a job, found by a refresh: its lease reads "ended"
    until a script reaps it, not a negative duration."""
    from playwright.sync_api import expect

    from tests.status.test_cluster import ended_lease

    pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
    get_pool()  # built before the lease ends: building it runs no script that would reap
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, live_server.url)
    holds = page.locator("#pdfpool-processes tr")
    expect(holds).to_have_text("No process holds anything.")
    with ended_lease(redis_server.url, namespace, lease=5.0) as worker:
        expect(holds.first.locator("td").first).to_contain_text(f":{worker.pid}")
        expect(holds.first.locator("td").last).to_have_text("ended")
    assert errors == []
    page.context.close()


def test_the_page_refreshes_itself_while_jobs_are_held(
    pdfpool, live_server, operator, fast_history, browser, threads
):
    from playwright.sync_api import expect

    pdfpool(SLOTS=2, QUEUE=3, WAIT=60)
    OUTPUT.mkdir(exist_ok=True)

    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    page = context.new_page()
    requested, errors = [], []
    page.on("request", lambda request: requested.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))

    def answer(data: bytes, ip: str) -> int:
        """Post off the main thread (Playwright runs a loop there) and wait for the status."""
        return threads.submit(post, "/held/sync/", data, ip).result(timeout=30).status_code

    field = lambda name: page.locator(f'#pdfpool-status [data-field="{name}"]')  # noqa: E731
    run_quick_jobs(threads)
    held = [threads.submit(post, "/held/sync/", b"%PDF- one", "10.2.0.1")]
    wait_until(lambda: get_pool().running() == 1)
    sign_in(page, live_server.url)
    expect(field("running")).to_have_text("1")
    expect(field("queued")).to_have_text("0")
    page.evaluate("window.pdfpoolNotReloaded = true")

    # More held: a second running job shared by a second caller, a full queue, refusals.
    held.append(threads.submit(post, "/held/sync/", b"%PDF- two", "10.2.0.2"))
    wait_until(lambda: get_pool().running() == 2)
    held.append(threads.submit(post, "/held/sync/", b"%PDF- two", "10.2.0.3"))
    wait_until(lambda: get_pool().waiting(held_key(b"%PDF- two")) == 1)
    for i, data in enumerate([b"%PDF- three", b"%PDF- four", b"%PDF- five"]):
        held.append(threads.submit(post, "/held/sync/", data, f"10.2.1.{i}"))
        wait_until(lambda n=i + 1: get_pool().queued() == n)
        if i == 0:  # while the queue has room: the caller's rule answers
            assert answer(b"%PDF- again", "10.2.0.1") == 429
    for i in range(3):
        assert answer(b"%PDF- turned away " + bytes([65 + i]), f"10.2.2.{i}") == 503
        time.sleep(0.4)  # spread out, so the chart shows them over time

    expect(field("running")).to_have_text("2", timeout=10_000)
    expect(field("queued")).to_have_text("3", timeout=10_000)
    expect(field("counters.refused_busy")).to_have_text("3", timeout=10_000)
    expect(field("counters.refused_caller")).to_have_text("1", timeout=10_000)
    expect(page.locator("#pdfpool-jobs tr.running")).to_have_count(2)
    expect(page.locator("#pdfpool-jobs tr.queued")).to_have_count(3)
    assert page.evaluate("window.pdfpoolNotReloaded") is True  # refreshed in place
    expect(page.locator("#pdfpool-live")).to_have_class(re.compile(r"\blive\b"))
    expect(page.locator('[data-gauge="queued"]')).to_have_class(re.compile(r"\bfull\b"))
    assert page.locator("#pdfpool-refused-chart path.refused").get_attribute("d")
    shared = page.locator("#pdfpool-jobs tr", has_text="10.2.0.2").locator("td").nth(3)
    assert shared.inner_text() == "2"

    updates = int(page.locator("#pdfpool-status").get_attribute("data-updates"))
    expect(page.locator("#pdfpool-status")).to_have_attribute(
        "data-updates", str(updates + 1), timeout=10_000
    )
    page.screenshot(path=OUTPUT / "status.png", full_page=True)
    if os.environ.get("PDFPOOL_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(OUTPUT / "status.png", ROOT / "docs" / "images" / "status.png")

    overflow = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    assert page.evaluate(overflow) == 0
    page.set_viewport_size({"width": 760, "height": 900})  # a narrow window: cards stack
    assert page.evaluate(overflow) == 0
    page.screenshot(path=OUTPUT / "status-narrow.png", full_page=True)

    dark = browser.new_context(
        viewport={"width": 1280, "height": 900},
        color_scheme="dark",
        storage_state=context.storage_state(),
    ).new_page()
    dark.goto(live_server.url + URL)
    expect(dark.locator('[data-field="running"]')).to_have_text("2")
    dark.screenshot(path=OUTPUT / "status-dark.png", full_page=True)

    context.clear_cookies()  # signed out: the next refresh fails and the page says so
    expect(page.locator("#pdfpool-live")).to_have_class(re.compile(r"\bstale\b"), timeout=10_000)

    HELD.release.set()
    assert sorted(f.result(timeout=30).status_code for f in held) == [200] * 6

    assert [e for e in errors if not e.endswith("/favicon.ico")] == []
    assert [url for url in requested if not url.startswith(live_server.url)] == []
