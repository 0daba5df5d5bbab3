"""Each job's child is reaped with its rusage: the process keeps the peak resident set of its
recent jobs (the kernel's figure, which the child cannot change), for sizing MEMORY_LIMIT."""

from __future__ import annotations

import time

import pytest

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool.sandbox.children import RECENT_JOBS, recent_peaks
from tests.conftest import wait_until
from tests.support import hungry
from tests.support.sandbox import run


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_jobs_peak_rss_is_recorded_when_its_child_is_reaped(warm):
    extraction.register_engine(hungry.ENGINE)
    extraction.configure(warm=False)  # a template started before the engine was registered goes
    extraction.configure(warm=True)
    if warm:
        run(hungry.document(0, "template"), engine=hungry.ENGINE)
        wait_until(lambda: bool(extraction.idle_pids()), timeout=30)
    for attempt in range(20):
        began = time.time()
        result = run(hungry.document(96, str(attempt)), engine=hungry.ENGINE, warm=warm)
        ended, peak, start = recent_peaks[-1]
        assert ended >= began and start == result.child_start
        assert 96 << 20 <= peak < 1 << 30, recent_peaks[-1]
        if result.child_start == ("forked" if warm else "cold"):
            break
        wait_until(lambda: bool(extraction.idle_pids()), timeout=30)
    else:
        raise AssertionError("no child of the kind wanted took the job")
    assert len(recent_peaks) <= RECENT_JOBS
