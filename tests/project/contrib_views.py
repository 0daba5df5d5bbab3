"""DRF and django-ninja views the contrib tests drive: every route kind, with a token
authentication of each framework (users that need no database)."""

from __future__ import annotations

from ninja import File, NinjaAPI, Router, UploadedFile
from ninja.errors import HttpError
from ninja.security import APIKeyHeader, HttpBearer, django_auth
from ninja.throttling import AnonRateThrottle as NinjaAnonThrottle
from rest_framework import viewsets
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.decorators import (
    action,
    api_view,
    authentication_classes,
    parser_classes,
    throttle_classes,
)
from rest_framework.decorators import permission_classes as permissions
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.versioning import AcceptHeaderVersioning
from rest_framework.views import APIView, exception_handler

from django_pdfpool.contrib import drf, ninja
from tests.project.views import gated_job, held_job

# --- DRF ---------------------------------------------------------------------


class TokenUser:
    """A user DRF's authentication returns: ``Token <name>`` is the user ``name``."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.pk = self.username = name


class Token(BaseAuthentication):
    """``Authorization: Token <name>``; without it DRF answers 401 (``authenticate_header``)."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.startswith("Token "):
            return None
        return TokenUser(header.removeprefix("Token ")), header

    def authenticate_header(self, request):
        return "Token"


def described(request) -> dict:
    pdf = request.pdf
    if pdf is None:
        return {"pdf": None}
    body = pdf if isinstance(pdf, dict) else {"text": pdf.text, "sha256": pdf.sha256}
    return {"pdf": body, "data": sorted(request.data.keys()), "user": request.user.pk}


def handled(exc, context):
    """The project's EXCEPTION_HANDLER: DRF's, marked, so a test sees it answered."""
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, drf.PdfPoolError):
        response.data["handled_by"] = "project"
        response.data["code"] = exc.error.code
    return response


class Protected(APIView):
    authentication_classes = (Token,)
    permission_classes = (IsAuthenticated,)
    parser_classes = (MultiPartParser, drf.PdfParser)


class HeldAPIView(Protected):
    @drf.pdf_pooled(job=held_job)
    def post(self, request):
        return Response(described(request))


class SessionHeldAPIView(HeldAPIView):
    """A session's user (DRF's CSRF check for them) or a token's."""

    authentication_classes = (SessionAuthentication, Token)


class VersionOne(AcceptHeaderVersioning):
    allowed_versions = ("1",)


class VersionedHeldAPIView(HeldAPIView):
    """``Accept: application/json; version=2`` is DRF's 406."""

    versioning_class = VersionOne


class ExtractAPIView(Protected):
    @drf.pdf_pooled
    def post(self, request):
        return Response(described(request))


class DefaultParsersAPIView(APIView):
    """DRF's default parsers: no PdfParser, so a raw PDF body is DRF's own 415."""

    authentication_classes = (Token,)
    permission_classes = (IsAuthenticated,)

    @drf.pdf_pooled
    def post(self, request):
        return Response(described(request))


@api_view(["POST"])
@authentication_classes([Token])
@permissions([IsAuthenticated])
@parser_classes([MultiPartParser, drf.PdfParser])
@drf.pdf_pooled(job=held_job)
def held_function(request):
    return Response(described(request))


@api_view(["POST"])
@authentication_classes([Token])
@permissions([IsAuthenticated])
@parser_classes([MultiPartParser, drf.PdfParser])
@drf.pdf_pooled(job=gated_job)
def gated_function(request):
    return Response(described(request))


class OnePerDay(AnonRateThrottle):
    """One upload a day for each address, counted in the test project's cache."""

    def get_rate(self):
        return "1/day"


@api_view(["POST"])
@authentication_classes([])
@permissions([AllowAny])
@throttle_classes([OnePerDay])
@parser_classes([drf.PdfParser])
@drf.pdf_pooled(job=held_job)
def throttled_function(request):
    return Response(described(request))


class AdminsOnly(BasePermission):
    """An authenticated user other than ``admin`` is refused: DRF's 403."""

    def has_permission(self, request, view):
        return getattr(request.user, "pk", None) == "admin"


@api_view(["POST"])
@authentication_classes([Token])
@permissions([AdminsOnly])
@drf.pdf_pooled(job=held_job)
def admins_function(request):
    return Response(described(request))


class TitledOnly(BasePermission):
    """A form without a ``title`` field is refused (DRF's 403): a permission that reads the body."""

    def has_permission(self, request, view):
        return "title" in request.data


@api_view(["POST"])
@authentication_classes([Token])
@permissions([TitledOnly])
@drf.pdf_pooled(job=held_job)
def titled_function(request):
    return Response(described(request))


class Documents(viewsets.ViewSet):
    authentication_classes = (Token,)
    permission_classes = (IsAuthenticated,)
    parser_classes = (MultiPartParser, drf.PdfParser)

    @drf.pdf_pooled(job=held_job)
    def create(self, request):
        return Response(described(request))

    @action(detail=False, methods=["post"])
    @drf.pdf_pooled(job=gated_job)
    def gated(self, request):
        return Response(described(request))

    @drf.pdf_pooled(job=held_job)  # above @action: the action's routing is kept
    @action(detail=False, methods=["post"], url_path="above")
    def above(self, request):
        return Response(described(request))


# --- django-ninja ------------------------------------------------------------


class Bearer(HttpBearer):
    """``Authorization: Bearer t-<anything>``: the token is what ``request.auth`` holds."""

    def authenticate(self, request, token):
        if token == "t-banned":
            raise HttpError(403, "This token is banned.")
        return token if token.startswith("t-") else None


api = NinjaAPI(urls_namespace="pdfpool-tests")


@api.exception_handler(ninja.PdfPoolHttpError)
def ninja_refused(request, exc: ninja.PdfPoolHttpError):
    """The project's own handler for the pool's refusals."""
    body = {"detail": exc.message, "code": exc.code, "handled_by": "project"}
    return api.create_response(request, body, status=exc.status_code)


def ninja_described(request) -> dict:
    pdf = request.pdf
    body = pdf if isinstance(pdf, dict) or pdf is None else {"text": pdf.text}
    return {"pdf": body, "auth": request.auth}


@api.post("/held", auth=Bearer())
@ninja.pdf_pooled(job=held_job)
async def ninja_held(request, file: File[UploadedFile]):
    return ninja_described(request) | {"file_name": file.name}


@api.post("/held-raw", auth=Bearer())
@ninja.pdf_pooled(job=held_job)
def ninja_held_raw(request):
    return ninja_described(request)


@api.post("/session", auth=django_auth)
@ninja.pdf_pooled(job=held_job)
async def ninja_session(request, file: File[UploadedFile]):
    return ninja_described(request) | {"auth": request.auth.pk}


@api.post("/raw", auth=Bearer())
@ninja.pdf_pooled
def ninja_raw(request):
    return ninja_described(request)


@api.post("/extract", auth=Bearer())
@ninja.pdf_pooled
async def ninja_extract(request, file: File[UploadedFile]):
    return ninja_described(request)


@api.post("/gated", auth=Bearer())
@ninja.pdf_pooled(job=gated_job)
async def ninja_gated(request, file: File[UploadedFile]):
    return ninja_described(request)


@api.post("/throttled", throttle=NinjaAnonThrottle("1/d"))
@ninja.pdf_pooled(job=held_job)
def ninja_throttled(request, file: File[UploadedFile]):
    return {"ran": True}


@api.post("/anonymous")
@ninja.pdf_pooled(job=held_job)
async def ninja_anonymous(request, file: File[UploadedFile]):
    return ninja_described(request) | {"auth": None}


class ApiKey(APIKeyHeader):
    """``X-API-Key: k-<anything>``: a credential outside ``Authorization`` and the session."""

    param_name = "X-API-Key"

    def authenticate(self, request, key):
        return key if key and key.startswith("k-") else None


@api.post("/keyed", auth=ApiKey())
@ninja.pdf_pooled
async def ninja_keyed(request, file: File[UploadedFile]):
    return ninja_described(request)


keyed = Router(auth=ApiKey())  # the router's authentication, not the operation's


@keyed.post("/held")
@ninja.pdf_pooled(job=held_job)
async def ninja_router_held(request, file: File[UploadedFile]):
    return ninja_described(request)


api.add_router("/router", keyed)

guarded = NinjaAPI(auth=Bearer(), urls_namespace="pdfpool-tests-guarded")  # the API's


@guarded.post("/held")
@ninja.pdf_pooled(job=held_job)
def guarded_held(request, file: File[UploadedFile]):
    return ninja_described(request)
