"""django-ninja: ``@pdf_pooled`` below ``@api.post(...)``, run after ninja's authentication,
its refusals handed as ``PdfPoolHttpError`` to the API's handlers (docs/ninja.md)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any, NoReturn, TypeVar, cast, overload

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import (
    BadRequest,
    ImproperlyConfigured,
    PermissionDenied,
    SuspiciousOperation,
)
from django.core.handlers.exception import response_for_exception
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.crypto import salted_hmac
from ninja.decorators import decorate_view
from ninja.errors import HttpError, ValidationError
from ninja.openapi.schema import BODY_CONTENT_TYPES
from ninja.operation import Operation as NinjaOperation
from ninja.operation import PathView
from ninja.utils import contribute_operation_callback

from ..callers import user_caller
from ..decorators import UploadJob, admitting, declared_view, extract_upload, resolve_job_name
from ..record import POOLED, route_of
from ..responses import TITLES, Failure, describe, json_answer

__all__ = ["PdfPoolHttpError", "auth_caller", "door_answer", "pdf_pooled"]

Operation = TypeVar("Operation", bound=Callable[..., Any])
Answer = TypeVar("Answer", bound=HttpResponseBase)

_SALT = "django_pdfpool.contrib.ninja.auth_caller"
_REFUSED = "_pdfpool_refused"  # the request's refusal raised in the operation, for its header
_RETRY_AFTER = {
    "description": "Seconds to wait before trying again (at least 1).",
    "schema": {"type": "integer", "minimum": 1},
}


class PdfPoolHttpError(HttpError):
    """A refusal, an extraction error or a rejected upload, as ninja's ``HttpError`` (its
    default handler answers ``{"detail": message}`` with ``status_code``); ``code``,
    ``retry_after`` (whole seconds or None) and ``error`` (the library's exception) for
    a handler of your own: ``@api.exception_handler(PdfPoolHttpError)``."""

    def __init__(self, error: Failure) -> None:
        said = describe(error)
        super().__init__(said.status, said.message)
        self.code, self.retry_after, self.error = said.code, said.retry_after, error


def auth_caller(request: HttpRequest) -> str | None:
    """The caller of ``request.auth``: ``user:<pk>`` for a user, else ``auth:<16 hex digits
    of an HMAC under SECRET_KEY>`` of it (a row: of its model and key); None when ninja did
    not authenticate, or returned ``True`` or an anonymous user (``CALLER`` then says)."""
    auth = getattr(request, "auth", None)
    if auth is None or isinstance(auth, bool) or getattr(auth, "is_anonymous", False) is True:
        return None
    if getattr(auth, "is_authenticated", False) and getattr(auth, "pk", None) is not None:
        return user_caller(auth)
    row = isinstance(auth, Model) and auth.pk is not None
    named = f"{auth._meta.label}:{auth.pk}" if row else str(auth)
    return "auth:" + salted_hmac(_SALT, named, algorithm="sha256").hexdigest()[:16]


@overload
def pdf_pooled(operation: Operation, /) -> Operation: ...


@overload
def pdf_pooled(
    operation: None = None,
    /,
    *,
    field: str = "file",
    job: UploadJob = extract_upload,
    job_name: str | None = None,
) -> Callable[[Operation], Operation]: ...


def pdf_pooled(
    operation: Operation | None = None,
    /,
    *,
    field: str = "file",
    job: UploadJob = extract_upload,
    job_name: str | None = None,
) -> Operation | Callable[[Operation], Operation]:
    """Decorate a ninja operation (below ``@api.post``): a POST's PDF (the multipart file
    ``field``, or the raw body) runs through the pool and ``request.pdf`` is the result."""
    name = resolve_job_name(job, job_name)
    if operation is None:
        return functools.partial(pdf_pooled, field=field, job=job, job_name=name)
    if getattr(operation, "_ninja_operation", None) is not None:
        raise ImproperlyConfigured(
            f"pdf_pooled is above @api.post on {operation.__qualname__}: ninja registered "
            "the function before it was decorated. Put @pdf_pooled below @api.post."
        )
    admission = declared_view(  # request.auth first; the door asks ninja's authentication
        job, name, field, _raised, auth_caller, authenticate=door_authenticate
    )
    wrapper = admitting(operation, admission)  # a refusal raised, as an operation's are
    setattr(wrapper, POOLED, dataclasses.replace(admission, answer=door_answer))  # the door's
    decorate_view(_schema_bound, _retry_after)(wrapper)
    contribute_operation_callback(wrapper, functools.partial(_registered, field))
    # ninja reads the parameters' annotations from the wrapper, in this module's globals:
    # hand it the operation's own, resolved where it was written (postponed annotations)
    with contextlib.suppress(NameError, TypeError, ValueError):
        cast(Any, wrapper).__signature__ = inspect.signature(operation, eval_str=True)
    return wrapper


def _registered(field: str, operation: NinjaOperation) -> None:
    """ImproperlyConfigured for an operation no upload could reach or satisfy; else the
    refusals and, if it declares none, the PDF body in its OpenAPI schema."""
    sources = {getattr(model, "__ninja_param_source__", None): model for model in operation.models}
    where = operation.view_func.__qualname__
    if "POST" not in operation.methods:
        raise ImproperlyConfigured(
            f"pdf_pooled extracts a POST's PDF, but {where} answers {', '.join(operation.methods)}"
            " only: request.pdf would always be None. Declare it with @api.post."
        )
    if "body" in sources and not {"file", "form"} & set(sources):
        raise ImproperlyConfigured(
            f"{where} takes {', '.join(map(repr, sources['body'].model_fields))} as its JSON "
            "body, where pdf_pooled reads the PDF: ninja would refuse every upload (400). Declare "
            f"such parameters as Form[...] beside {field}: File[UploadedFile], or as Query[...]."
        )
    found = sources.get("file")
    files = [info.alias or name for name, info in found.model_fields.items()] if found else []
    if files and field not in files:
        raise ImproperlyConfigured(
            f"pdf_pooled reads the PDF from the form field {field!r}, but {where} declares "
            f"File parameters {', '.join(map(repr, files))} only: ninja would ask for those "
            f"(422 without), the pool for {field!r} (400 without). Declare the PDF as "
            f"{field}: File[UploadedFile], or pass field={files[0]!r} to pdf_pooled."
        )
    if field in getattr(found, "__ninja_collection_fields__", ()):
        raise ImproperlyConfigured(
            f"pdf_pooled extracts one PDF, from the form field {field!r}, but {where} takes "
            "a list of files from it: the others would go unread. Take one file there "
            "(File[UploadedFile]); extract more with extract_pooled."
        )
    told = {status: title for status, title in TITLES.items() if isinstance(status, int)}
    told[401] = HTTPStatus.UNAUTHORIZED.phrase  # listed while it authenticates: _Responses
    responses: dict[int, dict[str, Any]] = {
        status: {"description": title}
        for status, title in sorted(told.items())
        if status not in operation.response_models  # the operation's own say more
    }
    for status in (429, 503):
        responses.setdefault(status, {})["headers"] = {"Retry-After": _RETRY_AFTER}
    extra: dict[str, Any] = {"responses": responses}
    if not sources.keys() & set(BODY_CONTENT_TYPES):
        pdf = {"type": "string", "format": "binary"}
        form = {"type": "object", "properties": {field: pdf}, "required": [field]}
        content = {"application/pdf": {"schema": pdf}, "multipart/form-data": {"schema": form}}
        extra["requestBody"] = {"required": True, "content": content}
    theirs = operation.openapi_extra or {}
    merged = _merged(extra, theirs)
    merged["responses"] = listed = _Responses(merged["responses"])
    if "401" not in map(str, theirs.get("responses", {})):  # else theirs, listed as they say
        listed.operation = operation
    operation.openapi_extra = merged


class _Responses(dict[Any, Any]):
    """An operation's responses for its schema, 401 among them while ``operation`` has ``auth``:
    ninja gives it its router's or API's as it mounts it (a copy: ``_schema_bound``)."""

    operation: NinjaOperation | None = None

    def __iter__(self) -> Iterator[Any]:
        hidden = self.operation is not None and not self.operation.auth_callbacks
        return (status for status in dict.keys(self) if not (hidden and status == 401))

    def keys(self) -> Any:  # what dict(responses) reads
        return list(self)

    def bound(self, operation: NinjaOperation) -> _Responses:
        copied = _Responses(dict.items(self))
        copied.operation = operation
        return copied


def _merged(ours: dict[Any, Any], theirs: dict[Any, Any]) -> dict[Any, Any]:
    """``theirs`` over ``ours`` key by key, as ninja merges ``openapi_extra`` into a schema;
    a key written as a string is ours of that name (a status "503" is our 503: one JSON key)."""
    merged = dict(ours)
    for key, value in theirs.items():
        key = next((mine for mine in merged if str(mine) == str(key)), key)
        mine = merged.get(key)
        merged[key] = (
            _merged(mine, value) if isinstance(mine, dict) and isinstance(value, dict) else value
        )
    return merged


def door_answer(request: HttpRequest, exception: Failure) -> HttpResponse:
    """The door's refusal on a ninja route: a ``PdfPoolHttpError`` answered by its API's
    exception handlers, with ``Retry-After``."""
    operation = _operation_of(request)
    if operation is None:  # not a ninja route after all: the library's own JSON answer
        return json_answer(request, exception)
    raised = PdfPoolHttpError(exception)
    return _with_retry_after(operation.api.on_exception(request, raised), raised)


def _raised(request: HttpRequest, exception: Failure) -> NoReturn:
    """A refusal in the operation: raised to ninja's handlers (``_retry_after`` adds the
    header), through any decorator between it and ``@api.post``."""
    raised = PdfPoolHttpError(exception)
    setattr(request, _REFUSED, raised)
    raise raised


def _schema_bound(run: Callable[..., Any]) -> Callable[..., Any]:
    """``Operation.run`` as it is; the operation ninja mounts (a copy, decorated again) gets
    schema responses of its own, its 401 listed by its own ``auth``."""
    operation = getattr(inspect.unwrap(run), "__self__", None)  # through decorate_view's
    if isinstance(operation, NinjaOperation) and operation.openapi_extra:
        listed = operation.openapi_extra.get("responses")
        if isinstance(listed, _Responses) and listed.operation is not None:
            responses = listed.bound(operation)
            operation.openapi_extra = {**operation.openapi_extra, "responses": responses}
    return run


def _retry_after(run: Callable[..., Any]) -> Callable[..., Any]:
    """``Operation.run`` whose answer to a refusal raised in the operation has ``Retry-After``."""
    if iscoroutinefunction(run):

        @functools.wraps(run)
        async def arun(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            response = await run(request, *args, **kwargs)
            return _with_retry_after(response, getattr(request, _REFUSED, None))

        return arun

    @functools.wraps(run)
    def srun(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _with_retry_after(run(request, *args, **kwargs), getattr(request, _REFUSED, None))

    return srun


def _with_retry_after(response: Answer, refused: PdfPoolHttpError | None) -> Answer:
    """``response``, with ``Retry-After`` for a refusal that has one, unless a handler set it."""
    after = getattr(refused, "retry_after", None)
    if after is not None and not response.has_header("Retry-After"):
        response["Retry-After"] = str(after)
    return response


def door_authenticate(request: HttpRequest, throttle: bool = False) -> HttpResponse | str | None:
    """ninja's 4xx from the headers (its authentication's, its throttles' 429 if ``throttle``
    or the parameters' 422 refuse, then that 422); else ``auth_caller``, if it authenticated."""
    operation = _operation_of(request)
    if operation is None:
        return None
    if operation.csrf_exempt:  # as Operation._run_checks: its auth skips the CSRF check
        request._ninja_csrf_exempt = True  # type: ignore[attr-defined]
    answer = None
    if operation.auth_callbacks:
        try:
            answer = NinjaOperation._run_authentication(operation, request)  # sync: a thread
        except (PermissionDenied, BadRequest, SuspiciousOperation) as refused:  # ninja leaves
            answer = response_for_exception(request, refused)  # these to Django: its 403, 400
    invalid = None if answer is not None else _invalid(operation, request)
    if answer is None and (throttle or invalid is not None) and operation.throttle_objects:
        answer = NinjaOperation._check_throttles(operation, request)
    answer = invalid if answer is None else answer  # as Operation.run: then the parameters
    if answer is not None and 400 <= answer.status_code < 500:
        return answer
    return auth_caller(request) if operation.auth_callbacks and answer is None else None


def _invalid(operation: NinjaOperation, request: HttpRequest) -> HttpResponse | None:
    """ninja's 422 for parameters the headers fail (a ``File`` where no form can hold it),
    asked of a copy; None if they pass or read the body (their answer needs it)."""
    probe, match = copy.copy(request), route_of(request)
    try:
        operation._get_values(probe, match.kwargs if match else {}, HttpResponse())
    except ValidationError as invalid:
        if not probe._read_started:  # type: ignore[attr-defined]
            return operation.api.on_exception(request, invalid)
    except Exception:  # the view meets it, with the body
        pass
    return None


def _operation_of(request: HttpRequest) -> NinjaOperation | None:
    """The POST operation ``request`` resolves to, held by the ``PathView`` its URL's view
    function closes over."""
    match = route_of(request)
    cells = getattr(match.func if match else None, "__closure__", None) or ()
    views = (cell.cell_contents for cell in cells if isinstance(cell.cell_contents, PathView))
    return next((op for view in views for op in view.operations if "POST" in op.methods), None)
