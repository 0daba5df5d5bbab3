"""Test-only engines (registered by the tests): what code run by a hostile PDF inside a job's
child could do to its parent's hold on it."""

from __future__ import annotations

import os
import signal
import time

from django_pdfpool.sandbox.engines import WARM_UP_PDF

LEAVE_GROUP = "tests.sandbox.hostile_engines:leave_group_and_stay"


def leave_group_and_stay(data: bytes) -> list[str]:
    """Moves into its parent's process group, stops its own alarm, then sleeps 30 s."""
    if data != WARM_UP_PDF:
        os.setpgid(0, os.getpgid(os.getppid()))
        signal.alarm(0)
        time.sleep(30)
    return [str(os.getpid())]
