"""A real Celery worker with its default pool, prefork: its children are forked from a parent
that ran Django's start-up once, and a child killed mid-job (the hard time limit's SIGKILL)
is replaced by another forked the same way. The copy the killed child staged goes with the
next copy staged after it, not with the worker's restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.conftest import wait_until
from tests.contrib.test_celery import PROJECT, ROOT, SOON
from tests.support.servers import project_env

pytest_plugins = ["tests.support.redis_fixtures"]

celery = pytest.importorskip("celery")
from celery.exceptions import TimeLimitExceeded  # noqa: E402

TASKS = """
import asyncio

from celery import shared_task

from django_pdfpool import extract_pooled


async def stuck(upload):
    await asyncio.sleep(600)


async def size(upload):
    return upload.size


@shared_task(time_limit=2)
def killed_mid_job():
    extract_pooled(b"%PDF- the killed child's", caller="celery:killed", job=stuck)


@shared_task
def staged_after():
    return extract_pooled(b"%PDF- the next child's", caller="celery:after", job=size)
"""


def staged_copies(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("pdfpool-"))


def test_a_child_killed_mid_job_leaves_no_copy_once_the_next_child_stages(tmp_path, redis_server):
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "tasks.py").write_text(TASKS)
    (project / "proj.py").write_text(PROJECT)
    staged = tmp_path / "worker-staged"
    staged.mkdir()
    broker = redis_server.url.rsplit("/", 1)[0] + "/2"
    env = {
        **os.environ,
        "BROKER": broker,
        "DJANGO_SETTINGS_MODULE": "tests.project.settings",
        "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]),
        "PDFPOOL_JSON": "{}",
        **project_env(staged),
    }
    command = [sys.executable, "-m", "celery", "-A", "proj", "worker", "--concurrency", "1"]
    command += ["--loglevel", "info", "--without-gossip", "--without-mingle"]
    process = subprocess.Popen(
        command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    log: list[bytes] = []
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            log.append(line)
            if b" ready." in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(SOON), b"".join(log).decode(errors="replace")
        client = celery.Celery("client", broker=broker, backend=broker)
        killed = client.send_task("myapp.tasks.killed_mid_job")
        with pytest.raises(TimeLimitExceeded):
            killed.get(timeout=SOON)
        left = staged_copies(staged)
        assert len(left) == 1, (left, b"".join(log).decode(errors="replace"))  # the premise

        after = client.send_task("myapp.tasks.staged_after").get(timeout=SOON)
        assert after == len(b"%PDF- the next child's")
        wait_until(lambda: staged_copies(staged) == [], 10)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
