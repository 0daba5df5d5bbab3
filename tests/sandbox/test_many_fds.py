"""A server with more than 1024 descriptors open (FD_SETSIZE, past which select() refuses
one): its job children's pidfd and status fd are beyond it, and a job is still answered,
its child killed and reaped."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SOON = 120

BUSY_SERVER = """
import asyncio, os, resource, sys, time
from django_pdfpool import extract
from django_pdfpool.sandbox import children, extract as extraction
from tests.conftest import wait_until
from tests.support import pdfs

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
extraction.configure(warm=True)
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # a busy server's sockets
probe = os.open(os.devnull, os.O_RDONLY)
assert probe >= 1024, probe  # the next descriptors, a job's among them, are past FD_SETSIZE
os.close(probe)
deadline = time.monotonic() + 60
while True:
    result = asyncio.run(extract(pdfs.simple(["many fds"]), timeout=20, memory_limit=512 << 20))
    assert result.pages == ("many fds",), result
    if result.child_start == "forked" or time.monotonic() > deadline:
        break
    wait_until(lambda: bool(extraction.idle_pids()), timeout=60)  # the template is starting
jobs = [h for h in children._live if isinstance(h, children.ForkedChild)]
print(result.child_start, len(jobs), flush=True)
"""


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2048, reason="the hard limit keeps fds low"
)
def test_a_job_is_answered_and_its_child_reaped_past_fd_setsize():
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", BUSY_SERVER],
        env=environ, cwd=ROOT, capture_output=True, text=True, timeout=SOON,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["forked", "0"], done.stdout + done.stderr  # none left unreaped
