"""The status page's tables in Debian's chromium: what its refresh finds (a body arriving at
the door, a job's peak RSS, a process's hold in Redis) replaces what the page was loaded
with, as the numbers beside them are, and a caller's name stays text."""

from __future__ import annotations

import asyncio
import datetime
import re
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest

from django_pdfpool import get_pool
from django_pdfpool.door import ARRIVING
from django_pdfpool.sandbox.children import recent_peaks
from tests.conftest import wait_until
from tests.support import pdfs
from tests.support.redis_server import free_port
from tests.support.sandbox import run

URL = "/admin/django_pdfpool/poolstatus/"
pytest_plugins = ["tests.support.redis_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


FAKE_CLOCKS: weakref.WeakSet = weakref.WeakSet()  # pages whose timers run on Playwright's clock


def signed_in(browser, live_server, *, fake_clock: bool = False, **context):
    """A page of the status signed in; ``fake_clock``: its timers on Playwright's clock (time
    flows as it does, and a test may jump it forward: ``page.clock.fast_forward``)."""
    page = browser.new_context(**context).new_page()
    if fake_clock:
        page.clock.install()
        FAKE_CLOCKS.add(page)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(live_server.url + URL)
    page.fill("#id_username", "operator")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(URL) + "$"))
    return page, errors


def refreshed(page) -> None:
    """Wait for a refresh that read the pool after this call: the second refresh from here
    (the first may have been on its way). On a fake clock, each comes without its 2 s: the
    clock jumps to the refresh's timer (one jump a refresh: an answer on its way has its 10 s
    all the same)."""
    from playwright.sync_api import expect

    status = page.locator("#pdfpool-status")
    for _ in range(2):
        done = int(status.get_attribute("data-updates") or 0)
        if page in FAKE_CLOCKS:
            page.clock.fast_forward(2_000)  # the page's refresh interval (data-refresh)
        expect(status).to_have_attribute("data-updates", re.compile(rf"^(?!{done}$)\d+$"))


def test_the_door_and_peaks_tables_follow_the_refresh(pdfpool, live_server, operator, browser):
    from playwright.sync_api import expect

    caller = 'ip:<img src=x onerror="document.title=1">'
    recent_peaks.clear()  # jobs earlier tests ran in this process
    ticket = ARRIVING.place(1, caller, None)
    assert ticket is not None
    try:
        page, errors = signed_in(browser, live_server, fake_clock=True)
        door, peaks = page.locator("#pdfpool-door"), page.locator("#pdfpool-peaks")
        expect(door.locator("td").first).to_have_text(caller)
        expect(peaks).to_have_text("No job ended yet.")
        ticket.release()
        with ThreadPoolExecutor(1) as thread:  # off the main thread: Playwright's loop is there
            thread.submit(run, pdfs.simple(["peak"])).result(60)
        refreshed(page)
    finally:
        ticket.release()
    expect(door).to_have_text("No body arriving.")
    expect(peaks.locator("tr").first.locator("td").nth(1)).to_have_text(
        re.compile(r"\d+ (MiB|GiB)")
    )
    assert errors == [] and page.title() != "1"


def test_a_signed_in_callers_body_at_the_door_is_shown_by_name_as_their_job_is(
    pdfpool, live_server, operator, browser
):
    """The door's table names a signed-in caller as the jobs' table does (the username; hover
    for ``user:<pk>``), loaded and refreshed, and the JSON says it in ``caller_name``."""
    from playwright.sync_api import expect

    caller = f"user:{operator.pk}"
    ticket = ARRIVING.place(1, caller, None)
    assert ticket is not None
    try:
        page, errors = signed_in(browser, live_server, fake_clock=True)
        cell = page.locator("#pdfpool-door td").first
        for _ in ("loaded", "refreshed"):
            expect(cell).to_have_text("operator")
            expect(cell.locator("span")).to_have_attribute("title", caller)
            refreshed(page)
        held = page.evaluate(f"fetch('{URL}?format=json').then((r) => r.json())")["door"]["held"]
    finally:
        ticket.release()
    assert [(h["caller"], h["caller_name"]) for h in held] == [(caller, "operator")]
    assert errors == []


def test_the_redis_processes_table_follows_the_refresh(
    pdfpool, live_server, operator, browser, redis_server, namespace
):
    from playwright.sync_api import expect

    pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
    pool = get_pool()
    opened = [False]

    async def job() -> int:
        while not opened[0]:
            await asyncio.sleep(0.005)
        return 1

    with ThreadPoolExecutor(1) as thread:
        done = thread.submit(asyncio.run, pool.run("k:" + "ab" * 32, "ip:192.0.2.1", job))
        try:
            page, errors = signed_in(browser, live_server, fake_clock=True)
            holds = page.locator(".pdfpool-cluster tbody tr").first.locator("td")
            expect(holds.nth(1)).to_have_text("1")  # running
        finally:
            opened[0] = True
        done.result(30)
    refreshed(page)
    expect(holds.nth(1)).to_have_text("0")
    assert errors == []


def test_times_are_shown_in_the_projects_time_zone_before_and_after_a_refresh(
    pdfpool, live_server, operator, browser, settings
):
    from playwright.sync_api import expect

    settings.TIME_ZONE = "America/New_York"  # the browser is elsewhere, as people are
    midnight = datetime.datetime(2026, 1, 15, 5, 0, 5, tzinfo=datetime.UTC)  # 00:00:05 there
    recent_peaks.clear()
    recent_peaks.append((midnight.timestamp(), 100 << 20, "cold"))
    try:
        page, errors = signed_in(
            browser, live_server, fake_clock=True, timezone_id="Asia/Tokyo", locale="en-US"
        )
        ended = page.locator("#pdfpool-peaks td").first
        since = page.locator("#pdfpool-since")
        expect(ended).to_have_text("00:00:05")
        loaded = since.inner_text()
        refreshed(page)
    finally:
        recent_peaks.clear()
    expect(ended).to_have_text("00:00:05")  # not Tokyo's 14:00:05
    expect(since).to_have_text(loaded)
    assert errors == []


@pytest.mark.parametrize("zone", ["posix/Asia/Kolkata", "localtime"])
def test_a_time_zone_the_browser_does_not_know_keeps_the_page_live(
    pdfpool, live_server, operator, browser, settings, zone
):
    """Zone names Django takes from the system's zoneinfo that Intl refuses ("posix/...",
    Debian's "localtime"): the page still refreshes, writing times as the server did."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from playwright.sync_api import expect

    try:
        ZoneInfo(zone)
    except ZoneInfoNotFoundError:
        pytest.skip(f"no {zone!r} in this system's zoneinfo")
    settings.TIME_ZONE = zone
    ended = datetime.datetime(2026, 1, 15, 5, 0, 5, tzinfo=datetime.UTC)
    shown = ended.astimezone(ZoneInfo(zone)).strftime("%H:%M:%S")
    recent_peaks.clear()
    recent_peaks.append((ended.timestamp(), 100 << 20, "cold"))
    try:
        page, errors = signed_in(browser, live_server, fake_clock=True, timezone_id="Asia/Tokyo")
        cell = page.locator("#pdfpool-peaks td").first
        for _ in ("loaded", "refreshed"):
            expect(cell).to_have_text(shown)
            refreshed(page)
    finally:
        recent_peaks.clear()
    expect(page.locator("#pdfpool-live")).to_contain_text("Live, updated")
    assert errors == []


def test_a_pool_without_a_queue_shows_no_full_queue(pdfpool, live_server, operator, browser):
    from playwright.sync_api import expect

    pdfpool(SLOTS=1, QUEUE=0)  # nothing queued, and nothing can queue: no alarm
    page, errors = signed_in(browser, live_server, fake_clock=True)
    queue = page.locator('[data-gauge="queued"]')
    expect(queue).not_to_have_class(re.compile(r"\bfull\b"))
    refreshed(page)
    expect(queue).not_to_have_class(re.compile(r"\bfull\b"))
    assert errors == []


def test_a_phone_wide_window_scrolls_the_wide_tables_not_the_page(
    pdfpool, live_server, operator, browser
):
    from playwright.sync_api import expect

    caller = "ip:2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"  # as long as a caller gets
    pdfpool(SLOTS=1, QUEUE=1)
    pool, opened = get_pool(), [False]

    async def job() -> int:
        while not opened[0]:
            await asyncio.sleep(0.005)
        return 1

    ticket = ARRIVING.place(1, caller, None)
    with ThreadPoolExecutor(1) as thread:
        done = thread.submit(asyncio.run, pool.run("views.job:" + "ab" * 32, caller, job))
        try:
            page, errors = signed_in(
                browser, live_server, fake_clock=True, viewport={"width": 375, "height": 800}
            )
            expect(page.locator("#pdfpool-jobs tr.running")).to_have_count(1)
            expect(page.locator("#pdfpool-door td").first).to_have_text(caller)
            overflow = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            assert page.evaluate(overflow) == 0  # as the admin's own pages at this width
        finally:
            opened[0] = True
            ticket.release()
        done.result(30)
    assert errors == []


def test_a_long_caller_wraps_and_leaves_every_column_in_view(
    pdfpool, live_server, operator, browser
):
    """A caller is any string ``CALLER`` returns (an API client's name, a token's subject):
    loaded and refreshed, a long one wraps in its cell, and the jobs' and the door's tables
    keep every column in view on a desktop window, none pushed past a scrollbar."""
    from playwright.sync_api import expect

    caller = "api:" + "k" * 150
    pdfpool(SLOTS=1, QUEUE=1)
    pool, opened = get_pool(), [False]

    async def job() -> int:
        while not opened[0]:
            await asyncio.sleep(0.005)
        return 1

    ticket = ARRIVING.place(1, caller, None)
    hidden = """() => [...document.querySelectorAll(".pdfpool-jobs, .pdfpool-door")]
        .filter((module) => module.scrollWidth > module.clientWidth).map((m) => m.className)"""
    with ThreadPoolExecutor(1) as thread:
        done = thread.submit(asyncio.run, pool.run("views.job:" + "ab" * 32, caller, job))
        try:
            page, errors = signed_in(
                browser, live_server, fake_clock=True, viewport={"width": 1280, "height": 800}
            )
            for _ in ("loaded", "refreshed"):
                expect(page.locator("#pdfpool-jobs tr.running td").nth(1)).to_have_text(caller)
                expect(page.locator("#pdfpool-door td").first).to_have_text(caller)
                assert page.evaluate(hidden) == []
                refreshed(page)
        finally:
            opened[0] = True
            ticket.release()
        done.result(30)
    assert errors == []


def test_in_a_right_to_left_admin_the_english_page_reads_left_to_right(
    pdfpool, live_server, operator, browser, settings
):
    """The page's own words are English: in an Arabic admin its figures keep their order
    ("10 s", not "s 10") and the chart's axis its ends ("now" at the right, where the chart
    draws now), and it says its language to a screen reader, loaded and refreshed."""
    settings.LANGUAGE_CODE = "ar"
    page, errors = signed_in(browser, live_server, fake_clock=True)
    assert page.evaluate("document.documentElement.dir") == "rtl"  # the admin's own
    said = """() => {
        const root = document.getElementById("pdfpool-status");
        const [ago, now] = [...root.querySelectorAll(".pdfpool-axis span")];
        const wait = root.querySelector("[data-field=wait]");
        return [root.closest("[lang]").lang, getComputedStyle(wait).direction,
            now.getBoundingClientRect().left > ago.getBoundingClientRect().left];
    }"""
    for _ in ("loaded", "refreshed"):
        assert page.evaluate(said) == ["en", "ltr", True]
        refreshed(page)
    assert errors == []


LOW_CONTRAST = """() => {
  // Text on the page below WCAG AA's contrast (4.5:1, 3:1 for large text), with the
  // opacity of it and its ancestors applied over the first opaque background behind it.
  const rgba = (css) => (css.match(/[\\d.]+/g) || []).map(Number);
  const lum = (rgb) => rgb.slice(0, 3).map((c) => c / 255)
    .map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4))
    .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
  const found = [];
  for (const el of document.querySelectorAll("#pdfpool-status *")) {
    const text = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent)
      .join("").trim();
    if (!text || !el.getClientRects().length) continue;
    let back = [255, 255, 255], alpha = 1;
    for (let up = el; up; up = up.parentElement) {
      const style = getComputedStyle(up), bg = rgba(style.backgroundColor);
      alpha *= parseFloat(style.opacity);
      if (bg.length === 3 || bg[3] > 0.5) { back = bg; break; }
    }
    const style = getComputedStyle(el), fg = rgba(style.color);
    alpha *= fg.length > 3 ? fg[3] : 1;
    const seen = fg.slice(0, 3).map((c, i) => c * alpha + back[i] * (1 - alpha));
    const [hi, lo] = [lum(seen), lum(back)].sort((a, b) => b - a);
    const large = parseFloat(style.fontSize) >= 24 || (parseFloat(style.fontSize) >= 18.66
      && parseInt(style.fontWeight, 10) >= 700);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < (large ? 3 : 4.5)) found.push(text + ": " + ratio.toFixed(2));
  }
  return found;
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_meets_wcag_aa_contrast(pdfpool, live_server, operator, browser, scheme):
    page, errors = signed_in(browser, live_server, fake_clock=True, color_scheme=scheme)
    refreshed(page)
    assert page.evaluate(LOW_CONTRAST) == []
    assert errors == []


def test_a_refresh_by_the_same_process_says_no_other_answered(
    pdfpool, live_server, operator, browser, settings
):
    from playwright.sync_api import expect

    settings.USE_THOUSAND_SEPARATOR = True  # a pid of 4 digits or more: "12,345"
    page, errors = signed_in(browser, live_server, fake_clock=True)
    refreshed(page)
    expect(page.locator("#pdfpool-switched")).to_be_hidden()
    assert errors == []


@pytest.mark.parametrize(
    ("settings_", "says"),
    [
        ({"REDIS": {"URL": "redis://127.0.0.1:{port}/0"}}, "refusing new work: Redis is failing"),
        ({"SANDBOX": {"LAYERS": False, "REQUIRE": "basic"}}, "refusing extractions: sandbox"),
    ],
    ids=["redis-unreachable", "sandbox-below-required"],
)
def test_the_state_says_new_work_is_refused_while_it_is(
    pdfpool, live_server, operator, browser, namespace, settings_, says
):
    from playwright.sync_api import expect

    if "REDIS" in settings_:  # nothing listens there: FALLBACK "refuse" answers 503
        url = settings_["REDIS"]["URL"].format(port=free_port())
        settings_ = {"REDIS": {"URL": url, "NAMESPACE": namespace}}
    pdfpool(**settings_)
    page, errors = signed_in(browser, live_server, fake_clock=True)
    state = page.get_by_role("status")  # a status message: read out when it changes (WCAG 4.1.3)
    for _ in ("loaded", "refreshed"):
        expect(state).to_contain_text(says)
        expect(state).to_have_class(re.compile(r"\brefusing\b"))
        refreshed(page)
    assert errors == []


def test_the_state_says_every_job_is_refused_while_redis_refuses_this_processs_settings(
    pdfpool, live_server, operator, browser, redis_server, namespace
):
    """A live process of another deployment in the namespace: loaded and refreshed, the
    badge says every job of this process is refused, and why."""
    import threading

    from playwright.sync_api import expect

    from tests.conftest import held
    from tests.support.redis_server import pools_in

    make, _ = pools_in(redis_server, namespace)  # stopped off this thread's (browser's) loop
    other, gate = make(1, 2, 3.0, deployment="other-deployment"), threading.Event()
    with ThreadPoolExecutor(1) as thread:
        running = thread.submit(asyncio.run, other.run("k", "c", held(1, gate)))
        try:
            wait_until(lambda: other.running() == 1)
            pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
            page, errors = signed_in(browser, live_server, fake_clock=True)
            state = page.locator("#pdfpool-state")
            for _ in ("loaded", "refreshed"):
                expect(state).to_contain_text("refusing every job: Another deployment uses")
                expect(state).to_have_class(re.compile(r"\brefusing\b"))
                refreshed(page)
        finally:
            gate.set()
            running.result(20)
            thread.submit(asyncio.run, other.stop()).result(20)
    assert errors == []


IN_RED = """() => {
  // The counters' cells shown in the admin's error colour.
  const probe = document.createElement("span");
  probe.style.color = "var(--error-fg)";
  document.body.append(probe);
  const red = getComputedStyle(probe).color;
  probe.remove();
  return [...document.querySelectorAll(".pdfpool-counters td")]
    .filter((td) => getComputedStyle(td).color === red).map((td) => td.dataset.field);
}"""


def test_only_refusals_that_happened_are_shown_in_red(pdfpool, live_server, operator, browser):
    from django_pdfpool.exceptions import CallerBusy

    pdfpool(SLOTS=1, QUEUE=1)
    pool, opened = get_pool(), [False]

    async def job() -> int:
        while not opened[0]:
            await asyncio.sleep(0.005)
        return 1

    page, errors = signed_in(browser, live_server, fake_clock=True)
    assert page.evaluate(IN_RED) == []  # no refusal yet: nothing to alarm about
    with ThreadPoolExecutor(2) as threads:  # off the main thread: Playwright's loop is there
        done = threads.submit(asyncio.run, pool.run("k:" + "ab" * 32, "ip:192.0.2.1", job))
        try:
            wait_until(lambda: pool.running() == 1)
            again = threads.submit(asyncio.run, pool.run("k:" + "cd" * 32, "ip:192.0.2.1", job))
            with pytest.raises(CallerBusy):  # the same caller's second job is refused
                again.result(30)
        finally:
            opened[0] = True
        done.result(30)
    refreshed(page)
    assert page.evaluate(IN_RED) == ["counters.refused_caller"]
    assert errors == []


def test_a_refresh_that_hangs_shows_the_page_stale(
    pdfpool, live_server, operator, browser, own_redis, namespace
):
    from playwright.sync_api import expect

    pdfpool(REDIS={"URL": own_redis.url, "NAMESPACE": namespace, "TIMEOUT": 60})
    page, errors = signed_in(browser, live_server, fake_clock=True)
    refreshed(page)
    own_redis.pause()  # connections stay open and nothing answers: each read waits 60 s
    try:
        live = page.locator("#pdfpool-live")
        # the page's 10 s (5 refreshes) for an answer, on its clock: jumped a second at a time
        # (its next refresh starts, and its wait runs out) rather than waited for
        deadline = time.monotonic() + 20
        while "stale" not in (live.get_attribute("class") or "").split():
            assert time.monotonic() < deadline, "the page never went stale"
            page.clock.fast_forward(1_000)
        expect(live).to_have_class(re.compile(r"\bstale\b"))
        assert "TimeoutError" in (live.get_attribute("title") or "")  # the hang, not an error
    finally:
        own_redis.resume()
    assert errors == []
