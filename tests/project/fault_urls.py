"""The test URLs plus ``/faults/state/``: what a fault must not leave behind in the server.

Tests-only: it looks into the process (the job loop's tasks, extraction threads, unreaped
children) where no production endpoint should.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from django.http import HttpRequest, JsonResponse
from django.urls import path

import django_pdfpool.sandbox.extract as extraction
from django_pdfpool.admission.jobs import get_job_loop
from django_pdfpool.configured import peek_pool
from django_pdfpool.door import door_status
from django_pdfpool.sandbox import children
from tests.project.urls import urlpatterns as base


def _job_loop_tasks() -> int:
    """Tasks on the pool's job loop, counted on that loop's own thread (by a callback,
    which is no task itself)."""
    loop = get_job_loop()
    counted: concurrent.futures.Future[int] = concurrent.futures.Future()
    loop.call_soon_threadsafe(lambda: counted.set_result(len(asyncio.all_tasks(loop))))
    return counted.result(timeout=5)


def state(request: HttpRequest) -> JsonResponse:
    """Job-loop tasks, extraction threads, unreaped children, the idle template, the pool
    and the door."""
    pool = peek_pool()
    threads = [t.name for t in threading.enumerate() if t.name.startswith("pdfpool-extract")]
    with children._live_lock:
        unreaped = len(children._live)
    return JsonResponse(
        {
            "tasks": _job_loop_tasks(),
            "extract_threads": len(threads),
            "unreaped_children": unreaped,
            "idle": extraction.idle_pids(),
            "pool": None if pool is None else pool.snapshot().as_dict(),
            "door": door_status(),
        }
    )


urlpatterns = [*base, path("faults/state/", state)]
