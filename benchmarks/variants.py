"""The load benchmark's URLs: the example's (``/api/extract/``: ``@pdf_pooled``, default
settings) and the designs it is compared to, which differ from it only in admission (same
settings, middleware, staging, extraction code and answer shape):

- ``/bench/naive/``: no admission: ``extract(..., warm=False)``, a cold child per upload;
- ``/bench/executor/``: a ``ProcessPoolExecutor(SLOTS)`` running the child's own job function
  (read, hash, pypdf) in long-lived workers without the child's limits; an unbounded queue;
- ``/bench/celery/``: a Celery task per upload (``celery_peer.py``), the view waiting for its
  result at most ``PEER_WAIT`` seconds (then 503);
- ``/bench/health/`` (polled during the load), ``/bench/plain/`` (a view that is not pooled),
  ``/bench/stats/`` (the jobs in the pool).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_pdfpool import extract
from django_pdfpool.conf import get_settings
from django_pdfpool.configured import peek_pool
from django_pdfpool.exceptions import EXTRACTION_MESSAGES as MESSAGES
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox import PAGE_SEPARATOR
from django_pdfpool.sandbox.child_main import extract_job
from django_pdfpool.sandbox.wire import Extracted, ExtractionJob
from django_pdfpool.uploads import StagedUpload, stage

PEER_WAIT = 60.0  # seconds the Celery view waits for its task's result

_lock = threading.Lock()
_executor: ProcessPoolExecutor | None = None


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
    """SLOTS long-lived workers, started (spawned: the server has threads) on first use."""
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
    if not isinstance(answer, Extracted):
        return _unreadable(answer.code)
    return JsonResponse({**asdict(answer), "text": PAGE_SEPARATOR.join(answer.pages)})


@csrf_exempt
async def celery_peer(request: HttpRequest) -> JsonResponse:
    """Send the staged upload's path to a Celery task and wait for its result."""
    from celery.exceptions import TimeoutError as NoResult

    from benchmarks.celery_peer import extract_text

    upload = await sync_to_async(_stage, thread_sensitive=False)(request)
    if upload is None:
        return _no_upload()

    def run() -> dict[str, object] | None:
        result = extract_text.delay(str(upload.path))
        try:
            return result.get(timeout=PEER_WAIT)  # type: ignore[no-any-return]
        except NoResult:
            result.revoke()
            return None

    try:
        answer = await sync_to_async(run, thread_sensitive=False)()
    finally:
        upload.discard()
    if answer is None:
        return JsonResponse({"error": "busy", "message": "No result in time."}, status=503)
    if "error" in answer:
        return _unreadable(str(answer["error"]))
    return JsonResponse(answer)


@csrf_exempt
def plain(request: HttpRequest) -> HttpResponse:
    """A view that is not pooled: what the door's cost is measured on."""
    return HttpResponse(b"ok", content_type="text/plain")


async def health(request: HttpRequest) -> JsonResponse:
    """The probe's page: it needs nothing but the server (async: no thread hand-off)."""
    return JsonResponse({"ok": True})


async def stats(request: HttpRequest) -> JsonResponse:
    """The jobs in flight in the pool: ``busy`` (0 when it is idle), ``running``, ``queued``."""
    pool = peek_pool()
    jobs = () if pool is None else pool.snapshot().jobs
    running = sum(job.state == "running" for job in jobs)
    return JsonResponse({"busy": len(jobs), "running": running, "queued": len(jobs) - running})


from demo.urls import urlpatterns as _example  # noqa: E402 - the example's, first

urlpatterns = [
    *_example,
    path("bench/naive/", naive),
    path("bench/executor/", pooled_executor),
    path("bench/celery/", celery_peer),
    path("bench/health/", health),
    path("bench/plain/", plain),
    path("bench/stats/", stats),
]
