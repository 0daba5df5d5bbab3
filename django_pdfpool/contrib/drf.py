"""Django REST framework: ``@pdf_pooled`` on a handler, run after DRF's authentication, its
refusals raised as DRF exceptions for the project's ``EXCEPTION_HANDLER`` (docs/drf.md)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import IO, Any, TypeVar, cast, overload

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.core.handlers.wsgi import LimitedStream
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.utils.datastructures import MultiValueDict
from rest_framework.exceptions import APIException, ErrorDetail, Throttled, UnsupportedMediaType
from rest_framework.parsers import DataAndFiles, FileUploadParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..callers import caller_of
from ..conf import get_settings
from ..decorators import (
    UploadJob,
    admit,
    declared_view,
    extract_upload,
    record_of,
    resolve_job_name,
)
from ..exceptions import UploadRejected, UploadTooLarge
from ..record import POOLED, route_of, without_body
from ..responses import Failure, describe

__all__ = [
    "PdfParser",
    "PdfPoolError",
    "PdfPoolThrottled",
    "api_exception",
    "door_answer",
    "pdf_pooled",
]

Handler = TypeVar("Handler", bound=Callable[..., Any])


class PdfPoolError(APIException):
    """A refusal, an extraction error or a rejected upload, raised in a view's place with the
    status of the library's answers (400, 408, 411, 413, 422); ``error`` is the library's own
    exception. DRF's handler answers its ``detail``: ``{"detail": message, "code": code}``."""

    error: Failure | None = None


class PdfPoolThrottled(Throttled, PdfPoolError):
    """429 (this caller has a PDF in progress) or 503 (the pool is full or closing): a
    ``Throttled`` whose ``wait`` DRF's handler sends as ``Retry-After`` and whose message
    ends, as a throttle's does, "Expected available in N seconds"."""


def api_exception(error: Failure) -> PdfPoolError:
    """The DRF exception for a failure: the status, code, message and retry time of the
    decorator's answers."""
    said = describe(error)
    if said.retry_after is None:
        found = PdfPoolError(said.message, said.code)
    else:
        found = PdfPoolThrottled(said.retry_after, said.message, said.code)
    found.status_code, found.error = said.status, error
    found.detail = {"detail": found.detail, "code": ErrorDetail(said.code, said.code)}
    return found


def door_answer(request: HttpRequest, exception: Failure) -> HttpResponse:
    """The door's answer on a DRF route: the exception the view would raise, answered by the
    route's view class as DRF would, from a copy of the request without its body."""
    unread = without_body(request)
    return cast(HttpResponse, door_authenticate(unread, False, api_exception(exception)))


def door_authenticate(
    request: HttpRequest, throttle: bool = False, exc: Exception | None = None
) -> HttpResponse | str | None:
    """DRF's answer (401, 403, 404, 406; ``throttle``: its 429, then its parsers' 415) for a request
    ``initial()``'s checks refuse from the headers, else the caller it names; or ``exc``
    answered past them; both by the route's view class (``APIView`` if none), as DRF would.
    ``request`` is the door's copy without the body: closed after."""
    try:  # Django closes the requests it made, not a copy
        match = request.resolver_match = route_of(request)  # as Django sets it: DRF reads it
        func, args, kwargs = (match.func, match.args, match.kwargs) if match else (None, (), {})
        view: Any = (getattr(func, "cls", None) or APIView)(**getattr(func, "initkwargs", {}))
        actions = getattr(func, "actions", None)  # a ViewSet's routing
        if actions is None:  # as Django's as_view() does (a ViewSet's view does not)
            view.setup(request, *args, **kwargs)
        view.action_map = actions or {}
        view.args, view.kwargs = args, kwargs
        view.headers = view.default_response_headers
        view.request = drf_request = view.initialize_request(request, *args, **kwargs)
        view.format_kwarg = view.get_format_suffix(**kwargs)
        try:  # as APIView.initial() does (past it, for ``exc``: the user its pages show)
            neg = view.perform_content_negotiation(drf_request)
            drf_request.accepted_renderer, drf_request.accepted_media_type = neg
            version, scheme = view.determine_version(drf_request, *args, **kwargs)
            drf_request.version, drf_request.versioning_scheme = version, scheme
            view.perform_authentication(drf_request)
            if exc is None:
                view.check_permissions(drf_request)
                if throttle:
                    view.check_throttles(drf_request)
                    _check_media_type(request, view, drf_request)
                return caller_of(drf_request)  # as the view names it, past the same checks
        except (APIException, Http404, PermissionDenied) as refused:  # what DRF's handler answers
            exc = exc or refused
        response = view.finalize_response(drf_request, view.handle_exception(exc))
        if isinstance(response, Response):
            response.render()
        return cast(HttpResponse, response)
    finally:
        request.close()


def _check_media_type(request: HttpRequest, view: Any, drf_request: Request) -> None:
    """DRF's 415 for a body none of the view's parsers takes, from its type (no byte read),
    unless the headers or the size refuse it first (400, 413)."""
    upload, limit = record_of(request).headers, get_settings().max_upload_size
    if isinstance(upload, UploadRejected) or upload.declares_too_much(limit):
        return
    parser = view.get_content_negotiator().select_parser(drf_request, view.get_parsers())
    if parser is None and drf_request.stream is not None:  # as Request._parse decides
        raise UnsupportedMediaType(drf_request.content_type)


class PdfParser(FileUploadParser):
    """A raw ``application/pdf`` body as ``request.data["file"]`` (no filename needed), read
    no further than ``MAX_UPLOAD_SIZE``: put it in a view's ``parser_classes``."""

    media_type = "application/pdf"

    def get_filename(self, stream: Any, media_type: Any, parser_context: Any) -> str:
        return str(super().get_filename(stream, media_type, parser_context) or "upload.pdf")

    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None
    ) -> DataAndFiles[Any, Any]:
        limit = get_settings().max_upload_size  # one byte more read tells a body over it
        limited = cast(IO[bytes], LimitedStream(cast(Any, stream), limit + 1))
        parsed = super().parse(limited, media_type, parser_context)
        file = parsed.files["file"]
        if (file.size or 0) > limit:
            file.close()  # deleted now, not when the garbage collector finds it
            raise api_exception(UploadTooLarge.over(limit))
        request = (parser_context or {}).get("request")
        request = getattr(request, "_request", request)  # as DRF does for a form's files:
        if request is not None:  # Django closes (deletes) them when the request ends
            request._post, request._files = QueryDict(), MultiValueDict({"file": [file]})
        return cast("DataAndFiles[Any, Any]", parsed)


@overload
def pdf_pooled(handler: Handler, /) -> Handler: ...


@overload
def pdf_pooled(
    handler: None = None,
    /,
    *,
    field: str = "file",
    job: UploadJob = extract_upload,
    job_name: str | None = None,
) -> Callable[[Handler], Handler]: ...


def pdf_pooled(
    handler: Handler | None = None,
    /,
    *,
    field: str = "file",
    job: UploadJob = extract_upload,
    job_name: str | None = None,
) -> Handler | Callable[[Handler], Handler]:
    """Decorate a DRF handler, ``post(self, request)`` or an ``@api_view`` function (under
    it): a POST's PDF (the multipart field ``field``, or a raw body that ``PdfParser``
    parsed) runs through the pool as the request's DRF user, and ``request.pdf`` is the
    result; what the view never sees is raised as a ``PdfPoolError``."""
    name = resolve_job_name(job, job_name)
    if handler is None:
        return functools.partial(pdf_pooled, field=field, job=job, job_name=name)
    where = getattr(handler, "__qualname__", repr(handler))
    if inspect.isclass(handler) or hasattr(handler, "cls"):
        raise ImproperlyConfigured(
            f"django_pdfpool.contrib.drf.pdf_pooled cannot decorate the view {where}: put "
            "it on the handler (`post(self, request)`, a ViewSet action) or below @api_view."
        )
    if iscoroutinefunction(handler):
        raise ImproperlyConfigured(
            f"{where} is async: Django REST framework runs synchronous handlers only."
        )
    admission = dataclasses.replace(
        declared_view(job, name, field, door_answer, authenticate=door_authenticate), parsers=True
    )

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        request = next((arg for arg in args[:2] if isinstance(arg, Request)), None)
        if request is None:  # `request` or `self, request`
            raise ImproperlyConfigured(
                f"{where} was called without a DRF Request: django_pdfpool.contrib.drf."
                "pdf_pooled goes on DRF handlers, below @api_view; for a plain Django view "
                "use django_pdfpool.pdf_pooled."
            )
        request._request.pdf = None  # type: ignore[attr-defined]  # read as request.pdf
        if request.method == "POST":  # the upload DRF parsed; the caller, DRF's user's
            refused = admit(admission, request._request, request)
            if refused is not None:
                raise api_exception(refused) from refused
        return handler(*args, **kwargs)

    setattr(wrapper, POOLED, admission)
    return cast(Handler, wrapper)
