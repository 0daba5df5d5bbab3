"""``@pdf_pooled``: admit a view's PDF upload through the pool before the view runs.

POST requests must carry the upload in ``field``; its SHA-256 (namespaced by the
job function) is the single-flight key, the caller comes from the CALLER setting,
and the view gets the job's result as ``request.pdf``. Other methods pass straight
through with ``request.pdf = None``. Refusals and extraction errors become answers
(see ``responses``) and the view does not run.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse

from .conf import get_settings
from .extraction import Extraction, ExtractionError, extract
from .pool import Refused
from .responses import answer, refusal_answer
from .singleton import get_pool
from .uploads import StagedUpload, stage

View = TypeVar("View", bound=Callable[..., Any])
Job = Callable[[StagedUpload], Awaitable[Any]]

_MULTIPART_SLACK = 64 * 1024  # bytes of form overhead allowed over MAX_UPLOAD_SIZE


async def extract_upload(upload: StagedUpload) -> Extraction:
    """The default job: extract the upload's text in a limited child process."""
    conf = get_settings()
    return await extract(
        upload.path,
        timeout=conf.timeout,
        memory_limit=conf.memory_limit,
        max_pages=conf.max_pages,
        engine=conf.engine,
        warm=conf.warm_children,
    )


def pdf_pooled(view: View | None = None, *, field: str = "file", job: Job = extract_upload) -> Any:
    """Decorate a sync or async view (bare, or with ``field=`` / ``job=``).

    ``job(upload)`` runs on the pool's own loop and returns the view's
    ``request.pdf``; identical uploads to the same job share one run.
    """
    if view is None:
        return functools.partial(pdf_pooled, field=field, job=job)
    namespace = f"{job.__module__}.{job.__qualname__}"

    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            request.pdf = None  # type: ignore[attr-defined]
            if request.method == "POST":
                prepared = await sync_to_async(_prepare, thread_sensitive=False)(request, field)
                if isinstance(prepared, HttpResponse):
                    return prepared
                if hasattr(request, "auser"):
                    request.user = await request.auser()  # resolved once, off the DB later
                caller_of = get_settings().caller
                if iscoroutinefunction(caller_of):
                    caller = await caller_of(request)
                else:
                    caller = caller_of(request)
                refused = await _submit(request, caller, namespace, job, prepared)
                if refused is not None:
                    return refused
            return await view(request, *args, **kwargs)

        return async_wrapper

    @functools.wraps(view)
    def sync_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        request.pdf = None  # type: ignore[attr-defined]
        if request.method == "POST":
            prepared = _prepare(request, field)
            if isinstance(prepared, HttpResponse):
                return prepared
            caller_of = get_settings().caller
            if iscoroutinefunction(caller_of):
                caller = async_to_sync(caller_of)(request)
            else:
                caller = caller_of(request)
            refused = async_to_sync(_submit)(request, caller, namespace, job, prepared)
            if refused is not None:
                return refused
        return view(request, *args, **kwargs)

    return sync_wrapper


def _prepare(request: HttpRequest, field: str) -> StagedUpload | HttpResponse:
    """Check the upload's size and presence, then stage a copy the job will own."""
    limit = get_settings().max_upload_size
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > limit + _MULTIPART_SLACK:
        return _too_large(request, limit)
    upload = request.FILES.get(field)
    if upload is None:
        return answer(
            request, 400, "no_upload", f"Send the PDF as a multipart file field named {field!r}."
        )
    if upload.size is not None and upload.size > limit:
        return _too_large(request, limit)
    return stage(upload, get_settings().temp_dir)


def _too_large(request: HttpRequest, limit: int) -> HttpResponse:
    return answer(
        request, 413, "too_large", f"PDFs up to {limit // 1024 // 1024} MiB are accepted."
    )


async def _submit(
    request: HttpRequest, caller: str, namespace: str, job: Job, upload: StagedUpload
) -> HttpResponse | None:
    """Run or join the upload's job; set ``request.pdf``, or return the refusal's answer.

    The job owns the upload from here on: the pool calls exactly one of the job
    (which deletes it when done) and ``discard`` (when the job will never run), so
    a caller that leaves never pulls the file from under a job that still needs it.
    """
    key = f"{namespace}:{upload.sha256}"
    fn = functools.partial(_owning, job, upload)
    try:
        request.pdf = await get_pool().run(key, caller, fn, on_drop=upload.discard)  # type: ignore[attr-defined]
    except (Refused, ExtractionError) as error:
        return refusal_answer(request, error)
    return None


async def _owning(job: Job, upload: StagedUpload) -> Any:
    """Run ``job`` on the upload, then delete the upload whatever the ending."""
    try:
        return await job(upload)
    finally:
        upload.discard()
