"""``@pdf_pooled``: a POST's PDF upload is staged, hashed and run through the pool before
the view runs, which gets the result as ``request.pdf`` (docs/usage.md)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse

from .conf import get_settings
from .exceptions import ExtractionError, Refused
from .process_pool import get_pool
from .responses import Answer, error_answer, negotiated_answer
from .sandbox.extract import Extraction, extract
from .uploads import StagedUpload, stage

View = TypeVar("View", bound=Callable[..., Any])
Job = Callable[[StagedUpload], Awaitable[Any]]
"""``job(upload)``: runs on the pool's job loop; what it returns becomes ``request.pdf``."""

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


def pdf_pooled(
    view: View | None = None,
    *,
    field: str = "file",
    job: Job = extract_upload,
    answer: Answer = negotiated_answer,
) -> Any:
    """Decorate a sync or async view, bare or with ``field=``, ``job=``, ``answer=``.

    ``job(upload)`` makes ``request.pdf`` (identical uploads to one job share a run);
    ``answer(request, status, code, message, retry_after)`` answers what the view never
    sees (400, 413, 422, 429, 503): by default JSON or HTML, as the client prefers.
    """
    if view is None:
        return functools.partial(pdf_pooled, field=field, job=job, answer=answer)
    pooled = _UploadAdmission(field, job, answer, f"{job.__module__}.{job.__qualname__}")

    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            request.pdf = None  # type: ignore[attr-defined]
            if request.method == "POST":
                # parsing the body and copying the upload block: not on the event loop
                prepared = await sync_to_async(pooled.prepare, thread_sensitive=False)(request)
                if isinstance(prepared, HttpResponse):
                    return prepared
                if hasattr(request, "auser"):
                    request.user = await request.auser()  # resolved once, off the DB later
                caller_of = get_settings().caller
                if iscoroutinefunction(caller_of):
                    caller = await caller_of(request)
                else:
                    caller = caller_of(request)
                refused = await pooled.submit(request, caller, prepared)
                if refused is not None:
                    return refused
            return await view(request, *args, **kwargs)

        return async_wrapper

    @functools.wraps(view)
    def sync_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        request.pdf = None  # type: ignore[attr-defined]
        if request.method == "POST":
            prepared = pooled.prepare(request)
            if isinstance(prepared, HttpResponse):
                return prepared
            caller_of = get_settings().caller
            if iscoroutinefunction(caller_of):
                caller = async_to_sync(caller_of)(request)
            else:
                caller = caller_of(request)  # here, not on a loop: it may touch the DB
            refused = async_to_sync(pooled.submit)(request, caller, prepared)
            if refused is not None:
                return refused
        return view(request, *args, **kwargs)

    return sync_wrapper


@dataclass(frozen=True)
class _UploadAdmission:
    """What one decorated view does with a POST, for its sync and async wrappers."""

    field: str
    job: Job
    answer: Answer
    job_name: str  # the job's dotted path: the first half of every key

    def prepare(self, request: HttpRequest) -> StagedUpload | HttpResponse:
        """Check the upload's size and presence, then stage a copy the job will own."""
        conf = get_settings()
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isdigit() and int(declared) > conf.max_upload_size + _MULTIPART_SLACK:
            return self._too_large(request, conf.max_upload_size)
        upload = request.FILES.get(self.field)
        if upload is None:
            message = f"Send the PDF as a multipart file field named {self.field!r}."
            return self.answer(request, 400, "no_upload", message, None)
        if upload.size is not None and upload.size > conf.max_upload_size:
            return self._too_large(request, conf.max_upload_size)
        return stage(upload, conf.temp_dir)

    def _too_large(self, request: HttpRequest, limit: int) -> HttpResponse:
        """413, before any work."""
        message = f"PDFs up to {limit / 1024 / 1024:g} MiB are accepted."
        return self.answer(request, 413, "too_large", message, None)

    async def submit(
        self, request: HttpRequest, caller: str, upload: StagedUpload
    ) -> HttpResponse | None:
        """Run or join the upload's job; set ``request.pdf``, or return the refusal's answer.
        The job owns the upload from here on: the pool calls exactly one of the job (which
        deletes it when done) and ``discard``, so a caller that leaves never pulls it away."""
        key = f"{self.job_name}:{upload.sha256}"
        fn = functools.partial(_run_then_discard, self.job, upload)
        try:
            result = await get_pool().run(key, caller, fn, on_drop=upload.discard)
        except (Refused, ExtractionError) as error:
            return error_answer(request, error, self.answer)
        request.pdf = result  # type: ignore[attr-defined]
        return None


async def _run_then_discard(job: Job, upload: StagedUpload) -> Any:
    """Run ``job`` on the upload, then delete the upload whatever the ending."""
    try:
        return await job(upload)
    finally:
        upload.discard()
