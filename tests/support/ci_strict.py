"""CI=true: what the environment must provide is a failure when missing, not a skip.

On a developer's machine a test that needs chromium, redis-server or the corpus
(../shared/corpus) skips, saying so. Under CI=true (``.ci/run`` sets it) such a skip fails
the run. Every skip of that kind names what is missing in its reason (the ``browser``
fixture, the Redis fixtures, the corpus tests), and the hook below, registered by
tests/conftest.py, turns a skip whose reason names one of them into a failure: the one
place that decides it, whichever test, fixture or marker skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import pytest

REQUIRED = re.compile(r"\b(chromium|redis-server|corpus)\b", re.IGNORECASE)


def in_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """CI=true (or 1, yes), as CI services and .ci/run set it."""
    return environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def strict_in_ci(report: pytest.TestReport, ci: bool) -> pytest.TestReport:
    """Make a skip for want of chromium, redis-server or the corpus a failure when ``ci``."""
    if not (ci and report.skipped) or hasattr(report, "wasxfail"):
        return report
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if REQUIRED.search(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true: a missing requirement fails the run ({reason})"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    return strict_in_ci((yield), in_ci())
