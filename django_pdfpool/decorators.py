"""``@pdf_pooled``: a POST's PDF upload is staged, hashed and run through the pool before
the view runs, which gets the result as ``request.pdf`` (docs/usage.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, MutableMapping
from typing import Any, TypeVar, cast, overload

from asgiref.sync import SyncToAsync, async_to_sync, iscoroutinefunction, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from .admission import jobs
from .callers import acaller_after, caller_after
from .conf import get_settings
from .configured import get_pool
from .exceptions import (
    DigestMismatch,
    ExtractionError,
    LengthRequired,
    NoUpload,
    Refused,
    UploadRejected,
    UploadTooLarge,
    Wording,
)
from .record import POOLED, RECORD, AdmissionRecord, Authenticate, PooledView, sent_headers
from .responses import Failure, RefusalView, arefusal_answer, refusal_answer
from .sandbox.extract import Extraction, extract
from .uploads import STAGING_CHUNK, StagedUpload, stage, stage_chunks

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., Any])
Result = TypeVar("Result")
UploadJob = Callable[[StagedUpload], Awaitable[Any]]
"""``job(upload)``: runs on the pool's job loop; what it returns becomes ``request.pdf``."""


async def extract_upload(upload: StagedUpload) -> Extraction:
    """The default job: extract the upload's text in a limited child process."""
    return await extract(upload.path, **get_settings().job_terms)


@overload
def pdf_pooled(view: ViewFunc, /) -> ViewFunc: ...


@overload
def pdf_pooled(
    view: None = None,
    /,
    *,
    field: str = "file",
    job: UploadJob = extract_upload,
    job_name: str | None = None,
    answer: RefusalView | None = None,
) -> Callable[[ViewFunc], ViewFunc]: ...


def pdf_pooled(
    view: ViewFunc | None = None,
    /,
    *,
    field: str = "file",
    job: UploadJob = extract_upload,
    job_name: str | None = None,
    answer: RefusalView | None = None,
) -> ViewFunc | Callable[[ViewFunc], ViewFunc]:
    """Decorate a sync or async view, bare or with ``field=``, ``job=``, ``answer=``.

    The PDF comes as the multipart file field ``field``, or as the whole body with
    ``Content-Type: application/pdf``. ``job(upload)`` makes ``request.pdf`` (identical
    uploads to one job share a run); ``job_name`` names the job in its keys (required
    for lambdas, closures, partials); ``answer(request, exception)`` answers what the view
    never sees (400, 413, 422, 429, 503) for this view only, as ``REFUSAL_VIEW`` does for
    every view by default.
    """
    name = resolve_job_name(job, job_name)  # an ambiguous job fails here, at decoration
    if answer is not None and not callable(answer):  # else a TypeError at the first refusal
        raise ImproperlyConfigured(
            f"answer= takes a function (request, exception) -> HttpResponse, not {answer!r}."
        )
    if view is None:
        return functools.partial(pdf_pooled, field=field, job=job, job_name=name, answer=answer)
    refuse_misplaced(view)
    return admitting(view, declared_view(job, name, field, answer))


def admitting(view: ViewFunc, pooled: PooledView) -> ViewFunc:
    """``view`` (sync or async) after ``admit``, a refusal answered by ``pooled.answer``."""

    @functools.wraps(view)
    async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        refused = await aadmit(pooled, request)
        if refused is not None:
            return await arefusal_answer(request, refused, pooled.answer)
        return await view(request, *args, **kwargs)

    @functools.wraps(view)
    def sync_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        refused = admit(pooled, request)
        if refused is not None:
            return refusal_answer(request, refused, pooled.answer)
        return view(request, *args, **kwargs)

    # an async view: a coroutine function, or an async class-based view's dispatch, which
    # method_decorator hands over bound in a partial
    bound_to = getattr(getattr(view, "func", None), "__self__", None)
    is_async = iscoroutinefunction(view) or getattr(bound_to, "view_is_async", False) is True
    wrapper = async_wrapper if is_async else sync_wrapper
    setattr(wrapper, POOLED, pooled)
    return cast(ViewFunc, wrapper)


def refuse_misplaced(view: Callable[..., Any]) -> None:
    """ImproperlyConfigured, at import, where ``@pdf_pooled`` could not see its request."""
    where = getattr(view, "__qualname__", None) or repr(view)
    if getattr(view, "_ninja_operation", None) is not None:
        raise ImproperlyConfigured(
            f"@pdf_pooled is above @api.post on {where}: django-ninja registered the function "
            "before it was decorated, so it would never run. Put the decorator below "
            "@api.post, and use django_pdfpool.contrib.ninja.pdf_pooled (docs/ninja.md)."
        )
    view_class = view if inspect.isclass(view) else getattr(view, "cls", None)
    if hasattr(view_class, "authentication_classes"):
        raise ImproperlyConfigured(
            f"@pdf_pooled wraps the DRF view {where} from outside: it would see the request "
            "before DRF authenticates it (the caller would be the client's address, and a "
            "request without credentials would be extracted before its 401). Use "
            "django_pdfpool.contrib.drf.pdf_pooled on the handler, or below @api_view "
            "(docs/drf.md)."
        )
    if inspect.isclass(view):
        raise ImproperlyConfigured(
            f"@pdf_pooled is on the class {where}, not a view function: decorate its handler "
            'with method_decorator(pdf_pooled, name="post") (docs/usage.md).'
        )
    parameters: list[str] = []
    with contextlib.suppress(TypeError, ValueError):  # not following __wrapped__: a bound partial
        parameters = list(inspect.signature(view, follow_wrapped=False).parameters)
    if parameters[:1] == ["self"]:
        raise ImproperlyConfigured(
            f"@pdf_pooled is on the method {where}, whose first argument is self, not the "
            'request: decorate the class with method_decorator(pdf_pooled, name="post"), or '
            "for DRF use django_pdfpool.contrib.drf.pdf_pooled on the handler (docs/usage.md)."
        )


def resolve_job_name(job: UploadJob, job_name: str | None = None) -> str:
    """The name that starts the job's keys: ``job_name``, else the job's dotted path when that
    names one function only (ImproperlyConfigured else)."""
    if job_name is not None:
        if not isinstance(job_name, str) or not job_name or not job_name.isprintable():
            raise ImproperlyConfigured(f"job_name must be a non-empty string, not {job_name!r}.")
        if any(c.isspace() or c in "{}" for c in job_name):
            raise ImproperlyConfigured(f"job_name {job_name!r} must not hold spaces or braces.")
        return job_name
    qualname = getattr(job, "__qualname__", "")
    if not inspect.isfunction(job) or "<lambda>" in qualname or "<locals>" in qualname:
        raise ImproperlyConfigured(
            f"@pdf_pooled cannot name the job {job!r} unambiguously: a lambda, closure, "
            "partial or callable object shares its name with other jobs, and uploads to "
            "jobs of one name share results. Pass a stable, unique name: "
            '@pdf_pooled(job=..., job_name="myapp.first_page").'
        )
    return f"{job.__module__}.{qualname}"


def declared_view(
    job: UploadJob,
    job_name: str | None,
    field: str = "file",
    answer: RefusalView | None = None,
    own_caller: Callable[[HttpRequest], str | None] | None = None,
    authenticate: Authenticate | None = None,
) -> PooledView:
    """The ``PooledView`` a decorator declares (the default job's keys carry its tag)."""
    name = resolve_job_name(job, job_name)
    tagged = job is extract_upload
    return PooledView(field, job, name, answer, own_caller, tagged, authenticate)


def pool_key(sha256: str) -> str:
    """The decorator's single-flight key for an upload with this digest to the default job."""
    return declared_view(extract_upload, None).key(sha256)


def record_of(request: HttpRequest) -> AdmissionRecord:
    """The record the door left in the request's scope or environ, else one read now."""
    scope: MutableMapping[str, Any] | None = getattr(request, "scope", None)
    found: AdmissionRecord | None = (scope or {}).get(RECORD) or request.META.get(RECORD)
    if found is None:
        found = request.META[RECORD] = AdmissionRecord.read(sent_headers(request))
    return found


@contextlib.contextmanager
def discarded_on_error(upload: StagedUpload) -> Iterator[StagedUpload]:
    """Delete ``upload`` if the block raises (or is cancelled): nobody else owns it yet."""
    try:
        yield upload
    except BaseException:
        upload.discard()
        raise


def admit(view: PooledView, request: HttpRequest, framework: Any = None) -> Failure | None:
    """A sync view's POST through the pool: None lets the view run (``request.pdf`` set), else
    the failure to answer. ``framework``: DRF's request, which parses and names the caller."""
    request.pdf = None  # type: ignore[attr-defined]
    if request.method != "POST":
        return None
    record = record_of(request)
    try:
        upload = prepare(view, request, record, framework)
    except UploadRejected as rejected:
        return rejected
    with discarded_on_error(upload):
        caller = _own_caller(view, request) or caller_after(framework or request, record.caller)
    try:
        return run_from_sync(functools.partial(submit, request, record, caller, upload, view))
    except SystemExit:  # gunicorn's quick stop, raised in a sync worker's thread as it waits:
        return jobs.stopped()  # answered as a job the pool stopped; the worker ends after it


def run_from_sync(call: Callable[[], Coroutine[Any, Any, Result]]) -> Result:
    """``call()`` awaited from sync code: for a sync view under ASGI on the server's loop (a
    client leaving cancels it), else on a loop of this thread's own (its current loop
    untouched), with no new thread, which an exiting process refuses (gunicorn's quick stop
    of a gthread worker)."""
    server = getattr(SyncToAsync.threadlocal, "main_event_loop", None)  # a sync_to_async's
    if server is not None and server.is_running():
        return async_to_sync(call)()
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(call())


async def stage_in_thread(make: Callable[[], StagedUpload]) -> StagedUpload:
    """``make()`` in a worker thread; a copy finished after the caller was cancelled is deleted
    (each side notes its part, then checks the other's)."""
    made: list[StagedUpload] = []
    cancelled = threading.Event()

    def make_or_discard() -> StagedUpload:
        made.append(staged := make())
        if cancelled.is_set():
            staged.discard()
        return staged

    try:
        return await sync_to_async(make_or_discard, thread_sensitive=False)()
    except asyncio.CancelledError:
        cancelled.set()
        for staged in made:
            staged.discard()
        raise


async def aadmit(view: PooledView, request: HttpRequest) -> Failure | None:
    """``admit`` for an async view: staging in a worker thread, the caller ``acaller_after``'s."""
    request.pdf = None  # type: ignore[attr-defined]
    if request.method != "POST":
        return None
    record = record_of(request)
    try:
        upload = await stage_in_thread(functools.partial(prepare, view, request, record))
    except UploadRejected as rejected:
        return rejected
    with discarded_on_error(upload):
        caller = _own_caller(view, request) or await acaller_after(request, record.caller)
    return await submit(request, record, caller, upload, view)


def _own_caller(view: PooledView, request: HttpRequest) -> str | None:
    return view.own_caller(request) if view.own_caller is not None else None


def prepare(
    view: PooledView, request: HttpRequest, record: AdmissionRecord, framework: Any = None
) -> StagedUpload:
    """Stage a copy of the upload for the job, checked for size, presence and digest
    (``UploadRejected`` else); the body as ``framework``'s parsers read it, if given."""
    conf = get_settings()
    upload, limit = record.headers, conf.max_upload_size
    if isinstance(upload, UploadRejected):
        raise upload
    if record.release is None and upload.declares_too_much(limit):
        raise UploadTooLarge.over(limit)  # (a door that let it in checked)
    if upload.raw and framework is None:
        body = iter(functools.partial(request.read, STAGING_CHUNK), b"")  # a chunk at a time
        staged = stage_chunks(body, "upload.pdf", conf.temp_dir, limit)
        if staged.size < (upload.declared_size or 1):  # none, or cut short (WSGI: client left)
            staged.discard()
            if upload.chunked and getattr(request, "scope", None) is None:  # WSGI reads none
                raise LengthRequired(Wording.CHUNKED_UNREAD)
            raise NoUpload(Wording.NO_UPLOAD.format(field=view.field))
    else:
        files = (request if framework is None else framework).FILES
        form_file = files.get(view.field if upload.boundary else "file")  # another parsed: "file"
        if form_file is None:
            raise NoUpload(Wording.NO_UPLOAD.format(field=view.field))
        staged = stage(form_file, conf.temp_dir, limit)
    with contextlib.suppress(AttributeError, OSError, ValueError):  # ASGI's spooled body: read,
        request._stream.truncate(0)  # not kept while the call waits
    if upload.digest is not None and upload.digest != staged.sha256:
        staged.discard()
        raise DigestMismatch(Wording.DIGEST_MISMATCH)
    return staged


async def submit(
    request: HttpRequest,
    record: AdmissionRecord,
    caller: str,
    upload: StagedUpload,
    view: PooledView,
) -> Refused | ExtractionError | None:
    """Run or join the upload's job and set ``request.pdf``, or return the refusal for the
    wrapper to answer in its own context (a refusal view may use the DB)."""
    record.caller, release, record.release = caller, record.release, None
    if release is not None:
        release()  # the door's place goes back: from here the pool counts this call
    try:
        result = await run_staged(upload, caller, view)
    except (Refused, ExtractionError) as error:
        return error
    request.pdf = result  # type: ignore[attr-defined]
    return None


async def run_staged(upload: StagedUpload, caller: str, view: PooledView) -> Any:
    """Run or join the view's job on ``upload`` (``Refused`` or the job's error); the pool
    calls exactly one of the job and ``on_drop``, each deleting the copy."""

    async def run_then_discard() -> Any:
        try:
            running = view.job(upload)
            if not inspect.isawaitable(running):  # a plain def: it ran, and returned its value
                raise TypeError(
                    f"The job {view.job_name!r} returned {type(running).__name__}, not an "
                    "awaitable: make it an async def (its waits then leave the job loop free)."
                )
            return await running
        finally:
            upload.discard()

    with discarded_on_error(upload):
        key = view.key(upload.sha256)
        pool = get_pool()
    return await pool.run(key, caller, run_then_discard, on_drop=upload.discard, size=upload.size)
