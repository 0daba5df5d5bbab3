"""The example's views: the upload page, the JSON API, and the job state the page polls.

All three are async: under uvicorn a request waiting for its turn in the pool holds
no thread, so the page's polls are answered while extractions queue and run. The
page and the API run the same job (``@pdf_pooled``'s default), so the same PDF sent
through both shares one extraction. The API takes no CSRF token but only requests
with an ``X-Requested-With`` header, which no other site can make a browser send;
the job state answers a caller about its own job only (staff: any).
"""

from __future__ import annotations

from functools import wraps
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from django_pdfpool import Extraction, get_pool, pdf_pooled
from django_pdfpool.callers import acaller_of
from django_pdfpool.conf import get_settings
from django_pdfpool.decorators import pool_key
from django_pdfpool.responses import Failure, json_answer

from . import results
from .answers import friendly_texts, problem

_DIGEST = "0" * 64  # stands for the digest in the job-state URL given to the script


def upload_page(
    request: HttpRequest,
    *,
    result: dict[str, Any] | None = None,
    problem: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    """The upload page, with an extraction's ``result`` or a refusal's ``problem``."""
    context = {
        "conf": get_settings(),
        "friendly": friendly_texts(),
        "result": result,
        "problem": problem,
        "api_url": request.build_absolute_uri(reverse("api-extract")),
        "jobs_url": reverse("job-state", args=[_DIGEST]).replace(_DIGEST, "{sha256}"),
    }
    return render(request, "uploads/index.html", context, status=status)


def page_answer(request: HttpRequest, exception: Failure) -> HttpResponse:
    """``@pdf_pooled``'s answers for people: the upload page with a friendly message."""
    shown = problem(exception)
    response = upload_page(request, problem=shown, status=shown["status"])
    if shown["retry_after"] is not None:
        response["Retry-After"] = str(shown["retry_after"])
    return response


def describe(pdf: Extraction, name: str) -> dict[str, Any]:
    """What the result part of the page shows of an extraction."""
    return {"pdf": pdf, "name": name, "metadata": sorted(pdf.metadata.items())}


@require_http_methods(["GET", "POST"])
@pdf_pooled(answer=page_answer)
async def index(request: HttpRequest) -> HttpResponse:
    """GET: the form. POST (the form without JavaScript): the same page with the result."""
    if request.pdf is None:  # type: ignore[attr-defined]
        return upload_page(request)
    return upload_page(request, result=describe(request.pdf, request.FILES["file"].name))  # type: ignore[attr-defined]


def scripts_only(view: Any) -> Any:
    """Refuse a POST without an ``X-Requested-With`` header (403), before any upload is
    staged: a cross-site form or simple request cannot send one, so another site cannot
    make a visitor's browser take their caller slot; fetch() and scripts can."""

    async def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.method == "POST" and not request.headers.get("X-Requested-With"):
            message = "Send the header X-Requested-With (any value) with the POST."
            return JsonResponse({"error": "header_required", "message": message}, status=403)
        return await view(request, *args, **kwargs)

    return wraps(view)(checked)


# No CSRF token (scripts have no CSRF cookie): scripts_only stops cross-site requests instead.
@csrf_exempt
@scripts_only
@pdf_pooled(answer=json_answer)
async def api_extract(request: HttpRequest) -> HttpResponse:
    """POST a PDF as the multipart field ``file``: the Extraction's fields as UTF-8 JSON
    with its ``pages`` (``?text=1``: their joined ``text`` instead), streamed; or the
    refusal or error as JSON (``error``, ``message``, ``retry_after``)."""
    if request.method != "POST":
        return JsonResponse(
            {"error": "method_not_allowed", "message": "POST the PDF as the multipart field file."},
            status=405,
            headers={"Allow": "POST"},
        )
    joined = request.GET.get("text", "") not in ("", "0")
    return results.answer(request, request.pdf, text=joined)  # type: ignore[attr-defined]


@require_GET
async def job_state(request: HttpRequest, sha256: str) -> JsonResponse:
    """Where this process's pool has the asking caller's upload with this SHA-256:
    ``queued`` (with the number of jobs ``ahead``), ``running`` (for ``running_for``
    seconds), or ``none`` (not arrived, done, or not this caller's: a job is the caller's
    that started it; one that joined another's is told ``none``; staff are told of any).
    With several server processes a poll may ask one that does not have the job."""
    user = await request.auser()
    caller = None if user.is_staff else await acaller_of(request)  # as @pdf_pooled asks
    # a Redis pool's snapshot reads Redis: not on this event loop
    snapshot = await sync_to_async(get_pool().snapshot, thread_sensitive=False)()
    key = pool_key(sha256)
    queued = [job for job in snapshot.jobs if job.state == "queued"]
    queue = sorted(queued, key=lambda job: job.queued_at)
    body: dict[str, Any] = {
        "state": "none",
        "slots": snapshot.slots,
        "running": snapshot.running,
        "queued": snapshot.queued,
    }
    for job in snapshot.jobs:
        if job.key == key and caller in (None, job.caller):
            body.update(state=job.state, queued_for=job.queued_for, running_for=job.running_for)
            if job.state == "queued":
                body["ahead"] = queue.index(job)
    return JsonResponse(body, headers={"Cache-Control": "no-store"})
