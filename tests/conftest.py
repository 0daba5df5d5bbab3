"""Shared fixtures: a fresh pool per test, staging into the test's own directory."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from django_pdfpool import process_pool
from tests.views import HELD


@pytest.fixture
def pdfpool(settings, tmp_path) -> Callable[..., dict]:
    """Set PDFPOOL for this test (a fresh pool); uploads are staged in tmp_path/staged."""
    staged = tmp_path / "staged"
    staged.mkdir()

    def configure(**values) -> dict:
        settings.PDFPOOL = {"TEMP_DIR": str(staged), "WARM_CHILDREN": False, **values}
        return settings.PDFPOOL

    configure()
    HELD.reset()
    yield configure
    HELD.release.set()  # never leave a held job behind for the next test
    pool = process_pool.peek_pool()
    if pool is not None:
        wait_until(lambda: pool.running() == 0 and pool.queued() == 0)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` from a test thread; fail if it does not hold in time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


# Debian's chromium, driven by Playwright, for the browser tests
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser():
    """A headless chromium; the test skips, saying why, where it is not installed."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Debian's chromium is not at {CHROMIUM}: `apt-get install chromium`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
