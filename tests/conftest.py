"""Shared fixtures and helpers: a fresh pool per test, staging into the test's own directory,
waits on observable state, threads for held requests; and, from tests/support/ci_strict.py, the
hook that makes a missing chromium, redis-server or corpus a failure under CI=true."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from django_pdfpool import configured, sandbox
from tests.project.views import HELD
from tests.support.ci_strict import pytest_runtest_makereport  # noqa: F401 (CI=true: see there)


@pytest.fixture
def operator(django_user_model, settings):
    """Staff with the status permission, and a password for the real login form.
    (Before the browser: Playwright's sync API runs a loop that forbids ORM calls.)"""
    from django.contrib.auth.models import Permission

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_pool_status"))
    return user


@pytest.fixture
def pdfpool(settings, tmp_path) -> Callable[..., dict]:
    """Set PDFPOOL for this test (a fresh pool); uploads are staged in tmp_path/staged
    (FILE_UPLOAD_TEMP_DIR: ``pdfpool.staged``) and jobs' children start cold."""
    staged = tmp_path / "staged"
    staged.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(staged)
    sandbox.configure(warm=False)

    def configure(**values) -> dict:
        settings.PDFPOOL = values
        return settings.PDFPOOL

    configure.staged = str(staged)  # type: ignore[attr-defined]
    configure()
    HELD.reset()
    yield configure
    sandbox.configure(warm=True, sandbox=True, require="none")  # its defaults, for the next
    HELD.release.set()  # never leave a held job behind for the next test
    pool = configured.peek_pool()
    if pool is not None:
        wait_until(lambda: pool.running() == 0 and pool.queued() == 0)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` from a test thread; fail if it does not hold in time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """``wait_until`` for a coroutine: poll ``condition`` on the loop; fail if it does not
    hold in time (never wait for ever: a regression fails instead of hanging)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


def held(result: object, gate: threading.Event, calls: list | None = None):
    """A job that notes it ran (in ``calls``), waits for ``gate`` (any thread may open
    it), then returns ``result``."""

    async def fn() -> object:
        if calls is not None:
            calls.append(result)
        while not gate.is_set():
            await asyncio.sleep(0.002)
        return result

    return fn


@contextmanager
def held_requests(workers: int) -> Iterator[ThreadPoolExecutor]:
    """Threads for requests whose jobs HELD holds. Leaving the block, however it is left,
    releases the held jobs before the threads are joined: a failed assertion inside it
    fails the test at once instead of waiting for threads that wait for the release."""
    threads = ThreadPoolExecutor(workers)
    try:
        yield threads
    finally:
        HELD.release.set()
        threads.shutdown(wait=True, cancel_futures=True)


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
