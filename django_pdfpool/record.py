"""One upload's admission record, built by the first entry that sees it and kept on the
request (its headers read once as Django reads them); and the pooled view of its URL."""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.urls import ResolverMatch, URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from django.utils.http import parse_header_parameters

from .conf import get_settings
from .exceptions import BadDigest, LengthRequired, RepeatedHeader, UploadRejected, Wording
from .responses import RefusalView

RECORD = "django_pdfpool.record"  # the AdmissionRecord's key in an ASGI scope or request.META
POOLED = "pdfpool_view"  # the attribute holding the PooledView of a view @pdf_pooled returns
PDF_TYPE = "application/pdf"
FORM_TYPE = "multipart/form-data"  # the one type Django parses into request.FILES
RAW_DIGESTS = ("repr-digest", "content-digest")  # RFC 9530, for a raw PDF body
FILE_DIGEST = "pdf-digest"  # the same syntax, for the file field of a multipart form
SHA256 = "sha-256"
MULTIPART_SLACK = 64 * 1024  # bytes of form overhead allowed over MAX_UPLOAD_SIZE
READ = frozenset(("content-type", "content-length", "transfer-encoding", *RAW_DIGESTS, FILE_DIGEST))

Headers = Mapping[str, str] | Iterable[tuple[str, str]]
# a framework's check from the headers, (request, throttle): its 401 (with throttle, its 429
# too), else the caller it names, if it can tell; then the framework names it, not CALLER
Authenticate = Callable[[HttpRequest, bool], HttpResponse | str | None]
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)  # a quoted string, maybe unclosed


@dataclass(frozen=True)
class UploadHeaders:
    """An upload as its headers describe it."""

    declared_size: int | None  # Content-Length; None when absent (chunked) or unreadable
    chunked: bool  # Transfer-Encoding: chunked (no declared size)
    raw: bool  # Content-Type: application/pdf, the body is the PDF itself
    digest: str | None  # the declared SHA-256 of the PDF, lower-case hex
    boundary: str | None = None  # a multipart/form-data body's ("" if none); None: another type

    @classmethod
    def of(cls, headers: Headers) -> UploadHeaders:
        """Read ``headers`` (a scope's pairs, or a mapping); ``UploadRejected`` for what Django
        and the door could read differently: a bad digest, a repeated header, a chunked form."""
        values = _collect(headers)
        sent_type = _one(values, "content-type")
        if "," in sent_type and "," in _QUOTED.sub("", sent_type):  # two joined: one has none
            raise RepeatedHeader(Wording.REPEATED_HEADER.format(header="Content-Type"))
        content_type, params = parse_header_parameters(sent_type)
        raw = content_type == PDF_TYPE
        chunked = "chunked" in ",".join(values.get("transfer-encoding", ())).lower()
        if chunked and content_type.startswith("multipart/"):
            raise LengthRequired(Wording.LENGTH_REQUIRED)
        names = RAW_DIGESTS if raw else (FILE_DIGEST,)
        digests = {d for n in names if n in values and (d := parse_digest(_one(values, n), n))}
        if len(digests) > 1:
            raise BadDigest(Wording.TWO_DIGESTS)
        return cls(
            declared_size=_length(_one(values, "content-length")),
            chunked=chunked,
            raw=raw,
            digest=digests.pop() if digests else None,
            boundary=_boundary(sent_type, params) if content_type == FORM_TYPE else None,
        )

    def body_limit(self, max_upload_size: int) -> int:
        """The most body bytes this upload may send: the PDF, plus a form's overhead."""
        return max_upload_size if self.raw else max_upload_size + MULTIPART_SLACK

    def file_sizes(self, field: str) -> tuple[int, int | None]:
        """The sizes its PDF may have (None: any): a raw body's; a form's ``field``, at most its
        body less the smallest envelope; chunks, or a type a framework may parse whole: any."""
        size = None if self.chunked else self.declared_size
        if size is not None and self.raw:
            return (size, size)
        if size is None or not self.boundary:
            return (0, None)
        # the headers and the closing boundary; Django also needs a byte after it: not counted
        envelope = f"--{self.boundary}content-disposition:;name={field};filename=x\r\n\r\n"
        return (0, size - len(envelope.encode("utf-8", "replace")))

    def holds_no_file(self, field: str) -> bool:
        """A multipart form Django takes no file ``field`` from, whatever its bytes: one without
        a boundary, or smaller than a file field's smallest envelope (``file_sizes``)."""
        high = self.file_sizes(field)[1]
        return self.boundary == "" or (high is not None and high < 0)

    def holds_no_pdf(self, parsers: bool = False) -> bool:
        """An empty raw body, or a type Django takes no file from; with ``parsers`` (DRF's read
        the body: they may take any type), a body without a length, which DRF never reads."""
        if parsers:
            return not self.declared_size
        if self.raw:
            return self.declared_size == 0 and not self.chunked
        return self.boundary is None

    def declares_too_much(self, max_upload_size: int) -> bool:
        """Its ``Content-Length`` is past ``body_limit``: 413 before a byte is read."""
        size = self.declared_size
        return size is not None and size > self.body_limit(max_upload_size)


def sent_headers(request: HttpRequest) -> Headers:
    """The request's headers as sent (an ASGI scope's one by one: Django joins a repeat); an
    HTTP/1 request framed by neither length nor chunks has a 0 length (RFC 9112 6.3)."""
    scope = getattr(request, "scope", None)
    if scope is None:
        sent = list(request.headers.items())
        version = str(request.META.get("SERVER_PROTOCOL", ""))
    else:
        sent = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in scope.get("headers", ())]
        version = f"HTTP/{scope.get('http_version', '')}"
    if version.startswith("HTTP/1") and not any(n.lower() in _FRAMING and v for n, v in sent):
        sent = [(n, v) for n, v in sent if n.lower() not in _FRAMING]  # wsgiref's ""
        sent.append(("content-length", "0"))
    return sent


_FRAMING = ("content-length", "transfer-encoding")


def _collect(headers: Headers) -> dict[str, list[str]]:
    """Each header's values by lower-case name, in the order sent (those ``READ`` only)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        if (lower := name.lower()) in READ:
            values.setdefault(lower, []).append(value)
    return values


def _one(values: dict[str, list[str]], name: str) -> str:
    """The value of a header that must come once ('' when absent): a repeat, which two readers
    could read differently, is a 400."""
    found = values.get(name, ())
    if len(found) > 1 and not (name == "content-length" and len({v.strip() for v in found}) == 1):
        raise RepeatedHeader(Wording.REPEATED_HEADER.format(header=name.title()))
    return found[0] if found else ""


def _boundary(content_type: str, params: dict[str, str]) -> str:
    """A form's boundary, "" if Django's multipart parser refuses ``content_type`` (a 400
    from the header alone: not ASCII, a type not starting "multipart/", a boundary it rejects)."""
    try:
        MultiPartParser({"CONTENT_TYPE": content_type}, io.BytesIO(), [])
    except MultiPartParserError:
        return ""
    return params["boundary"]


def _length(value: str) -> int | None:
    """``Content-Length`` as h11 and Django take it: a list of equal values is that value."""
    parts = {part.strip() for part in value.split(",")}
    part = parts.pop() if len(parts) == 1 else ""
    try:
        return int(part) if part.isascii() and part.isdigit() else None
    except ValueError:  # past the digits int() reads: Django's own reading fails too
        return None


_KEY = r"[a-z*][a-z0-9_.*-]*"  # RFC 8941's structured fields, as RFC 9651 writes them
# padding optional: at most two "=", after data (RFC 9651 4.2.7), as _bytes reads it
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2,3})?(?:(?<=[A-Za-z0-9+/])={1,2})?"
_BARE = (
    r"(?:-?\d{1,12}\.\d{1,3}(?![\d.])|-?\d{1,15}(?![\d.])|\?[01]|@-?\d{1,15}(?![\d.])"
    r'|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"|%"(?:[\x20\x21\x23\x24\x26-\x7e]|%[0-9a-f]{2})*"'
    rf"|[A-Za-z*][-!#$%&'*+.^_`|~:/0-9A-Za-z]*|:{_BASE64}:)"
)
_PARAMS = rf"(?:;[ ]*{_KEY}(?:={_BARE})?)*"
_ITEM = _BARE + _PARAMS
_MEMBER = re.compile(  # key, and the base64 of its value when that is a byte sequence
    rf"({_KEY})(?:=(?::([A-Za-z0-9+/=]*):{_PARAMS}|{_ITEM}"
    rf"|\([ ]*(?:{_ITEM}(?:[ ]+{_ITEM})*[ ]*)?\){_PARAMS})|{_PARAMS})"
)
_NEXT = re.compile(r"[ \t]*(?:,[ \t]*|$)")


def parse_digest(value: str, header: str = "Repr-Digest") -> str | None:
    """The ``sha-256`` of an RFC 9530 dictionary as lower-case hex (None: other algorithms
    only); two different ones (repeated headers joined), valid or not, are a 400."""
    found: set[bytes | str | None] = set()  # each member's bytes, or what is not bytes
    for name, item in _members(value, header):
        if name == SHA256:
            raw = None if item is None else _bytes(item)
            found.add(item if raw is None else raw)
    if len(found) > 1:
        raise RepeatedHeader(Wording.TWO_SHA256.format(header=header))
    if not found:
        return None
    (one,) = found
    if one is None:
        raise BadDigest(Wording.DIGEST_FORM.format(header=header))
    if isinstance(one, str):
        raise BadDigest(Wording.DIGEST_BASE64.format(header=header))
    if len(one) != 32:
        raise BadDigest(Wording.DIGEST_LENGTH.format(header=header))
    return one.hex()


def _members(text: str, header: str) -> Iterator[tuple[str, str | None]]:
    """An RFC 8941 dictionary's keys, each with its byte sequence's base64 (None for any
    other value); ``BadDigest`` if not a dictionary."""
    text, pos = text.lstrip(" "), 0
    while pos < len(text):
        member = _MEMBER.match(text, pos)
        comma = member and _NEXT.match(text, member.end())
        if member is None or comma is None or (comma.end() == len(text) and "," in comma[0]):
            raise BadDigest(Wording.DIGEST_LIST.format(header=header))
        if member[1] != SHA256 and member[2] is not None and _bytes(member[2]) is None:
            raise BadDigest(Wording.DIGEST_LIST.format(header=header))
        yield member[1], member[2]
        pos = comma.end()


def _bytes(text: str) -> bytes | None:
    """A byte sequence's base64 (padding optional, RFC 9651 4.2.7: at most two "=", after
    data); None if not base64."""
    bare = text.rstrip("=")
    if len(text) - len(bare) > 2 or (text and not bare):
        return None
    try:  # binascii.Error is a ValueError
        return base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
    except ValueError:
        return None


def format_digest(sha256_hex: str) -> str:
    """``sha-256=:<base64>:`` for a hex SHA-256: what a client sends."""
    return f"{SHA256}=:{base64.b64encode(bytes.fromhex(sha256_hex)).decode()}:"


@dataclass(frozen=True)
class PooledView:
    """What ``@pdf_pooled`` (or an integration) declares of a view for every stage before it."""

    field: str
    job: Callable[[Any], Awaitable[Any]]
    job_name: str
    answer: RefusalView | None  # None: the REFUSAL_VIEW setting
    own_caller: Callable[[HttpRequest], str | None] | None = None  # before CALLER: ninja's auth
    tagged: bool = False  # the default job: its key carries the settings' results tag
    authenticate: Authenticate | None = None
    parsers: bool = False  # DRF's parsers read the body (``UploadHeaders.holds_no_pdf``)

    def key(self, sha256: str) -> str:
        """``<job name>:<sha256>``, the single-flight key of an upload with this digest (the
        default job's carries the results tag: ``<job name>:<results tag>:<sha256>``)."""
        if self.tagged:
            return f"{self.job_name}:{get_settings().results_tag}:{sha256}"
        return f"{self.job_name}:{sha256}"


@dataclass(eq=False)
class AdmissionRecord:
    """One request's upload as the package knows it, built once; ``caller`` None until someone
    could tell who asks; ``release`` gives back the door's place while the body arrives."""

    headers: UploadHeaders | UploadRejected  # what they say, or why they cannot be taken
    caller: str | None = None
    release: Callable[[], None] | None = None
    key: str | None = None  # the single-flight key of the digest it declares, for its view

    @classmethod
    def read(cls, headers: Headers, view: PooledView | None = None) -> AdmissionRecord:
        try:
            upload = UploadHeaders.of(headers)
        except UploadRejected as rejected:
            return cls(rejected)
        key = view.key(upload.digest) if view is not None and upload.digest else None
        return cls(upload, key=key)

    def declares_body(self) -> bool:
        """Whether the request says a body follows (a length above 0, chunks, or unread headers)."""
        headers = self.headers
        return isinstance(headers, UploadRejected) or headers.chunked or bool(headers.declared_size)


def route_of(request: HttpRequest) -> ResolverMatch | None:
    """The route ``request`` resolves to, for an answer that reads its view (DRF's, ninja's):
    ``request.resolver_match`` where it is set already, else resolved here; None if none."""
    match: ResolverMatch | None = getattr(request, "resolver_match", None)
    return match or _resolved(request.path_info, getattr(request, "urlconf", None))


def pooled_route(path_info: str, urlconf: str | None = None) -> tuple[Any, PooledView] | None:
    """The view function Django will call for a POST to ``path_info``, and its pooled view;
    None if it is not pooled (Django's own resolver: no second list of URLs)."""
    match = _resolved(path_info, urlconf)
    if match is None or (found := pooled_view_of(match.func)) is None:
        return None
    return match.func, found


def _resolved(path_info: str, urlconf: str | None) -> ResolverMatch | None:
    try:
        return resolve(path_info, urlconf)
    except Resolver404:
        return None


def pooled_view_of(func: Callable[..., Any]) -> PooledView | None:
    """``func``'s pooled view, wherever a framework keeps it (on the function, on its class's
    POST handler or a DRF ViewSet's POST action, or closed over): read, no framework imported."""
    view_class = getattr(func, "view_class", None) or getattr(func, "cls", None)
    if getattr(func, POOLED, None) is None and view_class is not None:
        actions = getattr(func, "actions", None)  # a DRF ViewSet's {"post": "create"}
        name = actions.get("post") if isinstance(actions, dict) else "post"
        return _pooled(getattr(view_class, name, None) if isinstance(name, str) else None)
    return _pooled(func)


def _pooled(func: Callable[..., Any] | None) -> PooledView | None:
    """``func``'s own pooled view, or one it closes over: the function DRF's ``@api_view``
    handler calls, or the POST operation of the django-ninja path view ``func`` wraps."""
    candidates = [func]
    for held in _closed_over(func) if getattr(func, POOLED, None) is None else ():
        candidates += [held] if callable(held) else []
        for operation in getattr(held, "operations", None) or ():
            if "POST" in getattr(operation, "methods", ()):
                candidates.append(getattr(operation, "view_func", None))
    found = [view for each in candidates if (view := getattr(each, POOLED, None)) is not None]
    return cast(PooledView, found[0]) if found else None


def _closed_over(func: Any) -> list[Any]:
    """What ``func`` closes over: its cells' contents, an empty cell left out."""
    held = []
    for cell in getattr(func, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            held.append(cell.cell_contents)
    return held


def framework_mismatches() -> list[tuple[str, str]]:
    """Routes of DRF or django-ninja pooled by ``pdf_pooled``, not the framework's integration,
    with the integration to use (``manage.py check``): they answer refusals themselves."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, str]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                pooled, framework = pooled_view_of(pattern.callback), _framework(pattern.callback)
                integration = f"django_pdfpool.contrib.{framework}"
                if pooled and framework and getattr(pooled.answer, "__module__", "") != integration:
                    yield prefix + str(pattern.pattern), integration

    return list(walk(get_resolver().url_patterns, "/"))


def _framework(view: Any) -> str | None:
    """``"drf"`` or ``"ninja"`` for a view either framework made (read, not imported)."""
    if hasattr(getattr(view, "cls", None), "authentication_classes"):
        return "drf"
    closed = (type(held).__module__ for held in _closed_over(view))
    return "ninja" if any(module.startswith("ninja.") for module in closed) else None


def without_body(request: HttpRequest) -> HttpRequest:
    """A copy of ``request`` whose body reads empty, for the checks the door asks before the
    body (its ``_read_started``: whether they tried to read it)."""
    copied = copy.copy(request)
    for parsed in ("_post", "_files", "_body"):
        copied.__dict__.pop(parsed, None)
    copied._stream, copied._read_started = io.BytesIO(), False  # type: ignore[attr-defined]
    return copied
