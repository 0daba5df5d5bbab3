"""The load benchmark's server: the example project plus the two variants it is compared to.

The server is the example's own ``demo.asgi:application``, run from ``example_project/`` with
``DJANGO_SETTINGS_MODULE=benchmarks.variants_settings`` (the example's settings, this module as
the URLconf; see bench_load.py). Its URLs are the example's (``/api/extract/`` is the
**pdfpool** variant: ``@pdf_pooled`` with the default settings) and:

- ``/bench/naive/``: the same job with no admission at all: stage the upload as the
  decorator does, then ``extract(..., warm=False)``: one cold, limited child per request,
  as many at once as there are requests;
- ``/bench/executor/``: what most people write: a ``ProcessPoolExecutor(max_workers=SLOTS)``
  (bounded workers, an unbounded queue, no sharing) running the very function the child
  runs (``sandbox.child_main.extract_job``: read, hash, pypdf) on the staged upload, in
  long-lived workers without the child's limits;
- ``/bench/health/``: a cheap page, polled during the run to see whether the server still
  answers everything else;
- ``/bench/pooled/``: the example's API without its ``answer=json_answer``: the same
  ``@pdf_pooled`` job, its refusals answered by the default ``REFUSAL_VIEW`` (JSON for a
  client that accepts it), which the door calls on the event loop, not in a thread;
- ``/bench/plain/``: a plain sync view for any method (no pool, no upload): what a request
  to a view that is not pooled costs, with and without the door (bench_door.py);
- ``/bench/stats/``: extraction runs performed per variant (the pool's ``started``
  counter for pdfpool; a counter per view for the others), and the jobs in flight.

The three differ only in admission: same settings, middleware, staging, extraction code
and answer shape (the Extraction's fields as JSON; 422 with the error code for a PDF that
cannot be extracted).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_pdfpool import extract, pdf_pooled
from django_pdfpool.conf import get_settings
from django_pdfpool.configured import peek_pool
from django_pdfpool.exceptions import EXTRACTION_MESSAGES as MESSAGES
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox import PAGE_SEPARATOR
from django_pdfpool.sandbox.child_main import extract_job
from django_pdfpool.sandbox.wire import Extracted, ExtractionJob
from django_pdfpool.uploads import StagedUpload, stage

_runs = {"naive": 0, "executor": 0}
_lock = threading.Lock()
_executor: ProcessPoolExecutor | None = None


def _count(variant: str) -> None:
    with _lock:
        _runs[variant] += 1


def _stage(request: HttpRequest) -> StagedUpload | None:
    """The upload staged into FILE_UPLOAD_TEMP_DIR, as ``@pdf_pooled`` stages it (off the loop)."""
    upload = request.FILES.get("file")
    return None if upload is None else stage(upload, get_settings().temp_dir)


def _no_upload() -> JsonResponse:
    return JsonResponse({"error": "no_upload", "message": "Send a file."}, status=400)


def _unreadable(code: str) -> JsonResponse:
    return JsonResponse({"error": code, "message": MESSAGES.get(code, "")}, status=422)


@csrf_exempt
async def naive(request: HttpRequest) -> JsonResponse:
    """Extract every upload at once in its own cold child: no slots, no queue, no sharing."""
    upload = await sync_to_async(_stage, thread_sensitive=False)(request)
    if upload is None:
        return _no_upload()
    conf = get_settings()
    _count("naive")
    try:
        pdf = await extract(
            upload.path,
            timeout=conf.timeout,
            memory_limit=conf.memory_limit,
            max_pages=conf.max_pages,
            engine=conf.engine,
            warm=False,
            max_text_bytes=conf.max_text_bytes,
        )
    except ExtractionError as error:
        return _unreadable(error.code)
    finally:
        upload.discard()
    return JsonResponse(pdf.as_dict())


def executor() -> ProcessPoolExecutor:
    """SLOTS long-lived worker processes, started on the first request (spawned, not forked:
    the server has threads)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ProcessPoolExecutor(
                max_workers=get_settings().slots,
                mp_context=multiprocessing.get_context("spawn"),
            )
        return _executor


@csrf_exempt
async def pooled_executor(request: HttpRequest) -> JsonResponse:
    """Extract in the executor: every request is accepted and waits in its queue."""
    upload = await sync_to_async(_stage, thread_sensitive=False)(request)
    if upload is None:
        return _no_upload()
    conf = get_settings()
    job = ExtractionJob(
        path=upload.path,
        engine=conf.engine,
        timeout=conf.timeout,  # not enforced: the executor's workers have no limits
        memory_limit=conf.memory_limit,
        max_pages=conf.max_pages,
        refuse=False,
        max_text_bytes=conf.max_text_bytes,
    )
    try:
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(executor(), extract_job, job)
    finally:
        upload.discard()
    _count("executor")
    if not isinstance(answer, Extracted):
        return _unreadable(answer.code)
    return JsonResponse({**asdict(answer), "text": PAGE_SEPARATOR.join(answer.pages)})


async def health(request: HttpRequest) -> JsonResponse:
    """What "everything else" stands for: a page that needs nothing but the server."""
    return JsonResponse({"ok": True})


@csrf_exempt
@pdf_pooled
async def pooled(request: HttpRequest) -> JsonResponse:
    """The example's API, refusals answered by the default ``REFUSAL_VIEW``."""
    return JsonResponse(request.pdf.as_dict())  # type: ignore[attr-defined]


@csrf_exempt
def plain(request: HttpRequest) -> HttpResponse:
    """A view that is not pooled: what the door's URL resolution is measured against."""
    return HttpResponse(b"ok", content_type="text/plain")


async def stats(request: HttpRequest) -> JsonResponse:
    """Extraction runs performed so far, per variant, the pool's counters, and the jobs
    in flight in the pool (``busy``: 0 when it is idle; ``running`` and ``queued``)."""
    pool = peek_pool()
    snapshot = None if pool is None else pool.snapshot()
    counters = None if snapshot is None else asdict(snapshot.counters)
    with _lock:
        runs = dict(_runs)
    runs["pdfpool"] = 0 if counters is None else counters["started"]
    jobs = () if snapshot is None else snapshot.jobs
    running = sum(job.state == "running" for job in jobs)
    found = {"runs": runs, "pool": counters, "busy": len(jobs), "running": running}
    return JsonResponse({**found, "queued": len(jobs) - running, "pid": os.getpid()})


from demo.urls import urlpatterns as _example  # noqa: E402 - the example's, first

urlpatterns = [
    *_example,
    path("bench/naive/", naive),
    path("bench/executor/", pooled_executor),
    path("bench/health/", health),
    path("bench/pooled/", pooled),
    path("bench/plain/", plain),
    path("bench/stats/", stats),
]
