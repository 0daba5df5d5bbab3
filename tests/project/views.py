"""Views the Django tests drive: every shape of view @pdf_pooled must serve."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import ClassVar

from django.core.files.uploadhandler import FileUploadHandler
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.utils.deprecation import MiddlewareMixin
from django.views import View

from django_pdfpool import StagedUpload, get_pool, pdf_pooled
from django_pdfpool.conf import get_settings
from django_pdfpool.decorators import extract_upload
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.responses import json_answer


def _describe(request: HttpRequest) -> JsonResponse:
    pdf = getattr(request, "pdf", None)  # absent where the decorator does not apply
    if pdf is None:
        return JsonResponse({"pdf": None})
    if isinstance(pdf, dict):
        return JsonResponse({"pdf": pdf})
    return JsonResponse({"pdf": pdf.as_dict()})


@pdf_pooled
def sync_extract(request):
    return _describe(request)


@pdf_pooled(field="document")
async def async_extract(request):
    return _describe(request)


@method_decorator(pdf_pooled, name="post")
class SyncClassView(View):
    def get(self, request):
        return _describe(request)

    def post(self, request):
        return _describe(request)


@method_decorator(pdf_pooled, name="post")
class AsyncClassView(View):
    async def get(self, request):
        return _describe(request)

    async def post(self, request):
        return _describe(request)


class Held:
    """Jobs that wait for the test to let them go, and a record of every run."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.runs: list[str] = []
        self.paths: list[str] = []
        self.extract = False

    def reset(self, *, extract: bool = False) -> None:
        self.__init__()
        self.extract = extract


HELD = Held()


async def held_job(upload: StagedUpload):
    """A job that records its run, waits for HELD.release, then extracts or echoes."""
    HELD.runs.append(upload.sha256)
    HELD.paths.append(upload.path)
    while not HELD.release.is_set():
        await asyncio.sleep(0.005)
    if HELD.extract:
        return await extract_upload(upload)
    with open(upload.path, "rb") as file:
        return {"sha256": upload.sha256, "size": len(file.read())}


@pdf_pooled(job=held_job)
def sync_held(request):
    return _describe(request)


@pdf_pooled(job=held_job)
async def async_held(request):
    return _describe(request)


async def _direct_job():
    await asyncio.sleep(0)
    return "ran"


async def _unreadable_job():
    await asyncio.sleep(0)
    raise ExtractionError("malformed", detail="a direct job's unreadable file")


def _direct_job_for(request: HttpRequest):
    return _unreadable_job if request.GET.get("job") == "unreadable" else _direct_job


def sync_direct(request):
    """Calls the pool itself; refusals and extraction errors reach the client through
    AdmissionMiddleware (``?job=unreadable``: the job raises ExtractionError)."""
    from asgiref.sync import async_to_sync

    caller = request.GET.get("caller", "direct")
    job = _direct_job_for(request)
    result = async_to_sync(get_pool().run)(request.GET["key"], caller, job)
    return JsonResponse({"result": result})


async def async_direct(request):
    caller = request.GET.get("caller", "direct")
    result = await get_pool().run(request.GET["key"], caller, _direct_job_for(request))
    return JsonResponse({"result": result})


def plain(request):
    return JsonResponse({"plain": True})


def snapshot(request):
    """The server's pool, for end-to-end tests that watch it from outside."""
    from django_pdfpool.door import door_status

    return JsonResponse({**get_pool().snapshot().as_dict(), "door": door_status()})


def teapot_answer(request, exception):
    """A project's own answer function: proves @pdf_pooled hands it every answer."""
    retry = getattr(exception, "retry_after", None)
    return JsonResponse(
        {"mine": exception.code, "status": exception.status, "retry": retry}, status=418
    )


@pdf_pooled(answer=json_answer)
def json_only(request):
    return _describe(request)


@pdf_pooled(job=held_job, answer=teapot_answer)
async def own_answers(request):
    return _describe(request)


VIEW_RUNS: list[str] = []  # the paths of the counted views' runs: a refused upload adds none


@pdf_pooled(job=held_job)
def sync_counted(request):
    VIEW_RUNS.append(request.path)
    return _describe(request)


@pdf_pooled(job=held_job)
async def async_counted(request):
    VIEW_RUNS.append(request.path)
    return _describe(request)


@pdf_pooled
def sync_counted_extract(request):
    VIEW_RUNS.append(request.path)
    return _describe(request)


@pdf_pooled(field="document")
async def async_counted_extract(request):
    VIEW_RUNS.append(request.path)
    return _describe(request)


PARSED: list[str] = []  # the paths of requests whose body Django began to parse


class RecordingUploadHandler(FileUploadHandler):
    """First of FILE_UPLOAD_HANDLERS where a test puts it: records that Django began to
    parse a multipart body (and so to store its files), then lets the others do the work."""

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        PARSED.append(self.request.path if self.request is not None else "?")

    def receive_data_chunk(self, raw_data, start):
        return raw_data  # to the next handler

    def file_complete(self, file_size):
        return None  # the next handler makes the file


async def gated_job(upload: StagedUpload):
    """A job held until the file ``<FILE_UPLOAD_TEMP_DIR>/open`` exists: a gate another process (an
    end-to-end test outside the server) can open; then it echoes the upload's digest."""
    gate = os.path.join(get_settings().temp_dir or "", "open")
    while not os.path.exists(gate):
        await asyncio.sleep(0.005)
    return {"sha256": upload.sha256, "size": upload.size}


@pdf_pooled(job=gated_job)
def gated(request):
    return _describe(request)


class Threads:
    """What ``threaded`` saw: how many earlier requests each thread served (a thread-local
    count) and, for ``?hold=1``, an event the view waits on (30 s at most: nothing hangs)."""

    local = threading.local()
    hold = threading.Event()
    holding = threading.Event()


def threaded(request):
    """The thread a sync view runs on under ASGI, and how many requests it served before."""
    before = getattr(Threads.local, "served", 0)
    Threads.local.served = before + 1
    if request.GET.get("hold"):
        Threads.holding.set()
        Threads.hold.wait(30)
    thread = threading.current_thread()
    return JsonResponse({"thread": thread.name, "ident": thread.ident, "before": before})


class Orphans:
    """``orphaned``'s task: what its thread-sensitive call after the request gave."""

    go = threading.Event()
    outcome: ClassVar[list[object]] = []
    task: ClassVar[asyncio.Task[None] | None] = None


async def orphaned(request):
    """Starts a task that outlives the request, then makes a thread-sensitive call."""
    from asgiref.sync import sync_to_async

    async def later() -> None:
        await asyncio.get_running_loop().run_in_executor(None, Orphans.go.wait, 30)
        try:
            Orphans.outcome.append(await sync_to_async(threading.get_ident)())
        except RuntimeError as exc:
            Orphans.outcome.append(exc)

    Orphans.task = asyncio.create_task(later())
    return JsonResponse({"started": True})


class AllowOrigin(MiddlewareMixin):
    """A project's own middleware (CORS's shape): a header on every response."""

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        response["Access-Control-Allow-Origin"] = "https://app.example"
        return response


def db_refusal(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A project's ``REFUSAL_VIEW`` that reads the database, as a page with a menu would."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master")
        (tables,) = cursor.fetchone()
    return HttpResponse(f"{exception.code}: {tables} tables", status=499)


def db_caller(request: HttpRequest) -> str:
    """A project's sync ``CALLER`` that reads the database (an API key's owner, say)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master")
    return "db:" + (request.META.get("REMOTE_ADDR") or "-")


def sync_stored(request: HttpRequest) -> JsonResponse:
    """Extracts its form's file with ``extract_pooled``, no decorator: its failures reach the
    client through AdmissionMiddleware."""
    from django_pdfpool import extract_pooled

    extraction = extract_pooled(request.FILES["file"], caller="stored")
    return JsonResponse({"pages": extraction.page_count})


async def async_stored(request: HttpRequest) -> JsonResponse:
    from django_pdfpool import aextract_pooled

    extraction = await aextract_pooled(request.FILES["file"], caller="stored")
    return JsonResponse({"pages": extraction.page_count})
