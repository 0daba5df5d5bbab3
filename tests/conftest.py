"""Shared fixtures: a fresh pool per test, staging into the test's own directory."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from django_pdfpool import singleton
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
    pool = singleton._pool
    if pool is not None:
        wait_until(lambda: pool.running() == 0 and pool.queued() == 0)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` from a test thread; fail if it does not hold in time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)
