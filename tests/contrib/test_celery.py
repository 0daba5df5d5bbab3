"""The Celery task of docs/celery.md, run by a real worker (``celery worker --pool solo``)
with a real redis-server as its broker and as the Redis pool's coordinator: it extracts a
stored file under the cluster's pool, leaves the file alone; an upload of the same PDF to
this process joins the task's job (the only slot is the task's); and with the slot held
here for 5 s, the task (a ``PooledTask``) is refused and retried by Celery's autoretry
after the pool's Retry-After, at least 1 s each time, until it runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.test import Client

from django_pdfpool import extract_pooled, get_pool
from django_pdfpool.decorators import pool_key
from django_pdfpool.exceptions import CallerBusy, PoolBusy, PoolClosed, RunnerLost
from django_pdfpool.record import format_digest
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD, held_job
from tests.support import pdfs
from tests.support.servers import project_env
from tests.test_decorators import JSON, upload
from tests.test_docs import fences_of

pytest_plugins = ["tests.support.redis_fixtures"]

celery = pytest.importorskip("celery")

ROOT = Path(__file__).resolve().parents[2]
SOON = 90

PROJECT = """
import os

import django

django.setup()

from celery import Celery

app = Celery("proj", broker=os.environ["BROKER"], backend=os.environ["BROKER"])

import myapp.tasks  # noqa: E402,F401 (registers the shared task)
"""


def docs_task() -> str:
    """The code block docs/celery.md titles ``myapp/tasks.py``."""
    for block in fences_of(ROOT / "docs" / "celery.md").blocks:
        if block.title == "myapp/tasks.py":
            return block.body
    raise AssertionError("docs/celery.md has no myapp/tasks.py block")


@pytest.fixture
def worker(tmp_path, redis_server, namespace):
    """A Celery worker (solo pool) running the docs' task, its pool the Redis pool of
    ``namespace``; yields (the broker URL, the pool settings it uses)."""
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "tasks.py").write_text(docs_task())
    (project / "proj.py").write_text(PROJECT)
    staged = tmp_path / "worker-staged"
    staged.mkdir()
    pool = {
        "REDIS": {"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": 2.0},
        "SLOTS": 1,
        "QUEUE": 0,
        "WAIT": 30,
        "TIMEOUT": 40.0,  # bounds the refusals' Retry-After (x1.5 jitter): within SOON
    }
    broker = redis_server.url.rsplit("/", 1)[0] + "/1"
    env = {
        **os.environ,
        "BROKER": broker,
        "DJANGO_SETTINGS_MODULE": "tests.project.settings",
        "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]),
        "PDFPOOL_JSON": json.dumps(pool),
        **project_env(staged),
    }
    command = [sys.executable, "-m", "celery", "-A", "proj", "worker", "--pool", "solo"]
    command += ["--loglevel", "info", "--without-gossip", "--without-mingle"]
    process, log = started_worker(command, project, env)
    try:
        yield broker, pool, log
    finally:
        stop_worker(process)


def stop_worker(process: subprocess.Popen) -> None:
    """A warm shutdown (SIGTERM), killed if it takes longer than 30 s."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def started_worker(
    command: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.Popen, list[bytes]]:
    """A real Celery worker started, and its log (read as it writes it), once it says ready."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    log: list[bytes] = []
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            log.append(line)
            if b" ready." in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(SOON):
        process.kill()
        raise AssertionError(b"".join(log).decode(errors="replace"))
    return process, log


def test_a_worker_runs_the_docs_task_against_the_redis_pool(pdfpool, worker, tmp_path):
    broker, pool, log = worker
    client = celery.Celery("client", broker=broker, backend=broker)
    stored = tmp_path / "stored.pdf"
    stored.write_bytes(pdfs.simple(["extracted by a worker"]))
    done = client.send_task("myapp.tasks.extract_text", args=[str(stored)]).get(timeout=SOON)
    assert done["text"] == "extracted by a worker", b"".join(log).decode(errors="replace")
    assert stored.exists()  # the task's file: never deleted

    # the worker's job holds the cluster's only slot; this process's upload gets in only
    # by joining it (same key in two processes), declared so the door lets it in
    pdfpool(**pool)
    data = pdfs.slow_pdf("shared by a task and an upload", 1)  # else joined == 0 below
    slow = tmp_path / "slow.pdf"
    slow.write_bytes(data)
    sha256 = hashlib.sha256(data).hexdigest()
    pending = client.send_task("myapp.tasks.extract_text", args=[str(slow)])
    wait_until(lambda: get_pool().pressure(pool_key(sha256)).in_flight, SOON)
    response = Client(REMOTE_ADDR="10.0.10.1").post(
        "/sync/", {"file": upload(data)}, HTTP_PDF_DIGEST=format_digest(sha256), **JSON
    )
    assert response.status_code == 200, response.content
    assert response.json()["pdf"]["sha256"] == sha256
    tasked = pending.get(timeout=SOON)
    assert tasked["sha256"] == sha256
    assert tasked["text"].startswith("shared by a task and an upload")
    assert get_pool().snapshot().counters.joined == 1
    assert get_pool().snapshot().counters.started == 2  # the two tasks: the upload ran none

    # the docs' retry: with the only slot held here for 5 s, the task is refused
    # (PoolBusy) and retried by Celery's autoretry after the pool's Retry-After, never
    # sooner than 1 s, and does not give up; once the slot is free, a retry runs
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(extract_pooled, b"%PDF- holds the slot", caller="test:hold", job=held_job)
        wait_until(lambda: HELD.runs != [])
        held_until = time.monotonic() + 5
        retried = client.send_task("myapp.tasks.extract_text", args=[str(stored)])
        wait_until(lambda: time.monotonic() > held_until, SOON)
        while_held = countdowns(log)
        HELD.release.set()
    assert retried.get(timeout=SOON)["text"] == "extracted by a worker"
    assert len(while_held) >= 1, b"".join(log).decode(errors="replace")
    assert min(countdowns(log)) >= 1.0, countdowns(log)
    assert b"PoolBusy" in b"".join(log)


def countdowns(log: list[bytes]) -> list[float]:
    """The countdowns of the retries the worker logged (Celery's "Retry in 1.27s: ...")."""
    return [float(found) for found in re.findall(rb"Retry in ([0-9.]+)s", b"".join(log))]


@pytest.mark.parametrize("refusal", [PoolBusy, CallerBusy, RunnerLost])
def test_a_refusal_that_trying_again_fixes_is_retried(refusal):
    """``RunnerLost`` (the process running a shared job died: trying again runs it anew) is
    retried like a busy pool, not a task's failure; ``PoolClosed`` (this worker stops) is not.
    Eager: Celery runs each retry at once, here, whatever its countdown."""
    from django_pdfpool.contrib.celery import PooledTask

    app = celery.Celery("retries", set_as_current=False)
    app.conf.task_always_eager = True
    tries: list[int] = []

    @app.task(base=PooledTask, bind=True, retry_jitter=False)
    def task(self, closed=False):
        tries.append(self.request.retries)
        if len(tries) == 1:
            raise PoolClosed() if closed else refusal("refused", retry_after=2.0)
        return "ran"

    assert task.apply().get() == "ran"
    assert tries == [0, 1]
    tries.clear()
    with pytest.raises(PoolClosed):
        task.apply(kwargs={"closed": True}).get()
    assert tries == [0]


def test_a_tasks_result_is_the_extractions_dict_not_the_extraction():
    """Celery's default serializer (JSON) cannot encode an ``Extraction``, as docs/celery.md
    says; ``as_dict()`` passes and ``from_dict()`` rebuilds the same one."""
    from kombu.utils.json import dumps, loads

    from django_pdfpool import Extraction

    extraction = Extraction(
        sha256="0" * 64, page_count=1, pages=("one",), metadata={"Title": "t"},
        truncated=False, elapsed=0.1, peak_rss=1 << 20,
    )  # fmt: skip
    with pytest.raises(TypeError):
        dumps(extraction)
    assert Extraction.from_dict(loads(dumps(extraction.as_dict()))) == extraction
