"""Real Celery workers with their default pool, prefork: children forked from a parent that
ran Django's start-up once, signalled by it (the soft time limit's SIGUSR1) and killed by it
(the hard time limit's SIGKILL), each replaced by another forked the same way."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.contrib.test_celery import PROJECT, ROOT, SOON, countdowns, started_worker, stop_worker
from tests.support.servers import project_env

pytest_plugins = ["tests.support.redis_fixtures"]

celery = pytest.importorskip("celery")
from celery.exceptions import TimeLimitExceeded  # noqa: E402

TASKS = """
import asyncio
import threading
import time

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from django_pdfpool import extract_pooled, get_pool
from django_pdfpool.contrib.celery import PooledTask
from django_pdfpool.exceptions import PoolBusy

RELEASE = threading.Event()


async def held(upload):
    while not RELEASE.is_set():
        await asyncio.sleep(0.01)
    return upload.size


async def size(upload):
    return upload.size


@shared_task(time_limit=2)
def killed_mid_job():
    extract_pooled(b"%PDF- the killed child's", caller="celery:killed", job=held)


@shared_task
def staged_after():
    return extract_pooled(b"%PDF- the next child's", caller="celery:after", job=size)


def holding_the_slot():  # a thread whose held job takes the only slot, until RELEASE
    RELEASE.clear()
    holder = threading.Thread(
        target=extract_pooled,
        args=(b"%PDF- holds the only slot",),
        kwargs={"caller": "celery:holder", "job": held},
        daemon=True,
    )
    holder.start()
    while get_pool().running() == 0:
        time.sleep(0.01)
    return holder


@shared_task(bind=True, base=PooledTask, max_retries=1)
def retried_from_its_except_block(self):
    holder = holding_the_slot()
    try:
        extract_pooled(b"%PDF- refused", caller="celery:refused", job=held)
    except PoolBusy:
        raise self.retry()  # Celery's idiom: the exception being handled is the one retried
    finally:
        RELEASE.set()
        holder.join(10)


@shared_task(soft_time_limit=2)
def queued_past_its_soft_limit():
    holder = holding_the_slot()
    started = time.monotonic()
    try:
        extract_pooled(b"%PDF- queued behind it", caller="celery:queued", job=held)
    except SoftTimeLimitExceeded:
        interrupted = time.monotonic() - started
        while get_pool().queued() and time.monotonic() < started + 10:
            time.sleep(0.01)
        return {"interrupted_after": interrupted, "queued": get_pool().queued()}
    finally:
        RELEASE.set()
        holder.join(10)
    return {"interrupted_after": None}
"""


def staged_copies(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("pdfpool-"))


@pytest.fixture
def prefork(tmp_path, redis_server, namespace) -> Iterator[Callable[..., Any]]:
    """``prefork(**PDFPOOL)``: a worker with one prefork child running TASKS, its pool the
    child's own; yields ``send_task`` to its queue, its staging directory and its log."""
    started: list[subprocess.Popen] = []

    @contextmanager
    def start(**pdfpool) -> Iterator[tuple[object, Path, list[bytes]]]:
        project = tmp_path / "project"
        (project / "myapp").mkdir(parents=True)
        (project / "myapp" / "__init__.py").write_text("")
        (project / "myapp" / "tasks.py").write_text(TASKS)
        (project / "proj.py").write_text(PROJECT)
        staged = tmp_path / "worker-staged"
        staged.mkdir()
        broker = redis_server.url.rsplit("/", 1)[0] + "/2"
        queue = f"prefork-{namespace}"
        env = {
            **os.environ,
            "BROKER": broker,
            "DJANGO_SETTINGS_MODULE": "tests.project.settings",
            "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]),
            "PDFPOOL_JSON": json.dumps(pdfpool),
            **project_env(staged),
        }
        command = [sys.executable, "-m", "celery", "-A", "proj", "worker", "--concurrency", "1"]
        command += ["--loglevel", "info", "--without-gossip", "--without-mingle", "-Q", queue]
        process, log = started_worker(command, project, env)
        started.append(process)
        client = celery.Celery("client", broker=broker, backend=broker)
        yield functools.partial(client.send_task, queue=queue), staged, log

    yield start
    for process in started:
        stop_worker(process)


def test_a_child_killed_mid_job_leaves_no_copy_once_the_next_child_stages(prefork):
    with prefork() as (send, staged, log):
        with pytest.raises(TimeLimitExceeded):
            send("myapp.tasks.killed_mid_job").get(timeout=SOON)
        left = staged_copies(staged)
        assert len(left) == 1, (left, b"".join(log).decode(errors="replace"))  # the premise

        after = send("myapp.tasks.staged_after").get(timeout=SOON)
        assert after == len(b"%PDF- the next child's")
        wait_until(lambda: staged_copies(staged) == [], 10)


def test_a_task_past_its_soft_time_limit_leaves_the_queue_at_once(prefork):
    """SoftTimeLimitExceeded reaches the task while its job is queued, and the job, left by
    its only caller, gives up its place (as a cancelled async caller's does)."""
    with prefork(SLOTS=1, QUEUE=1, WAIT=30) as (send, staged, log):
        told = send("myapp.tasks.queued_past_its_soft_limit").get(timeout=SOON)
        assert told["interrupted_after"] is not None, b"".join(log).decode(errors="replace")
        assert told["interrupted_after"] < 10
        assert told["queued"] == 0
        wait_until(lambda: staged_copies(staged) == [], 10)


def test_a_retry_from_the_except_block_counts_down_the_refusals_estimate(prefork):
    """``raise self.retry()`` in ``except PoolBusy:`` (no ``exc=``: Celery takes the exception
    being handled) waits the pool's estimate, not Celery's default_retry_delay (180 s)."""
    with prefork(SLOTS=1, QUEUE=0) as (send, _staged, log):
        send("myapp.tasks.retried_from_its_except_block")
        wait_until(lambda: countdowns(log), SOON)
        assert countdowns(log)[0] < 60, b"".join(log).decode(errors="replace")
