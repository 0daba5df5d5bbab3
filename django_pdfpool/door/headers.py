"""One reading of a request, before its body: the door, ``AdmissionMiddleware`` and
``@pdf_pooled`` read the method, ``Content-Type``, ``Content-Length``, ``Transfer-Encoding``
and the digest headers here, as Django reads them (docs/door.md).

``UploadHeaders.of`` takes the headers as (name, value) pairs as the server sent them (an
ASGI scope's) or a mapping (WSGI's environ, where a server has already joined repeated
headers with commas, as Django's ASGI handler does).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..exceptions import BadDigest, LengthRequired, RepeatedHeader, Wording

PDF_TYPE = "application/pdf"
RAW_DIGESTS = ("repr-digest", "content-digest")  # RFC 9530, for a raw PDF body
FILE_DIGEST = "pdf-digest"  # the same syntax, for the file field of a multipart form
SHA256 = "sha-256"
SINGLE = ("content-type", "content-length", *RAW_DIGESTS, FILE_DIGEST)
"""Headers that must come once: two of them could be read differently by two readers."""

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


def is_post(method: str | None) -> bool:
    """``method`` is a POST as Django sees it (``request.method`` is upper-cased)."""
    return (method or "").upper() == "POST"


@dataclass(frozen=True)
class UploadHeaders:
    """An upload as its headers describe it."""

    declared_size: int | None  # Content-Length; None when absent (chunked) or unreadable
    chunked: bool  # Transfer-Encoding: chunked (no declared size)
    expects_continue: bool  # Expect: 100-continue: the client waits before the body
    raw: bool  # Content-Type: application/pdf, the body is the PDF itself
    digest: str | None  # the declared SHA-256 of the PDF, lower-case hex

    @classmethod
    def of(cls, headers: Headers) -> UploadHeaders:
        """Read ``headers``; ``UploadRejected`` for what neither Django nor the door can
        read alike: a malformed digest, a repeated header, a chunked multipart form."""
        values = _collect(headers)
        content_type = _one(values, "content-type")
        if "," in _unquoted(content_type):  # two, joined by a server: one media type has none
            raise RepeatedHeader(Wording.REPEATED_HEADER.format(header="Content-Type"))
        content_type = content_type.split(";", 1)[0].strip().lower()
        raw = content_type == PDF_TYPE
        chunked = "chunked" in ",".join(values.get("transfer-encoding", ())).lower()
        if chunked and content_type.startswith("multipart/"):
            raise LengthRequired(Wording.LENGTH_REQUIRED)
        names = RAW_DIGESTS if raw else (FILE_DIGEST,)
        digests = {d for name in names if (d := parse_digest(_one(values, name), name))}
        if len(digests) > 1:
            raise BadDigest(Wording.TWO_DIGESTS)
        return cls(
            declared_size=_length(_one(values, "content-length")),
            chunked=chunked,
            expects_continue=_one(values, "expect").strip().lower() == "100-continue",
            raw=raw,
            digest=digests.pop() if digests else None,
        )


def _collect(headers: Headers) -> dict[str, list[str]]:
    """Each header's values by lower-case name, in the order sent."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name.lower(), []).append(value)
    return values


def _one(values: dict[str, list[str]], name: str) -> str:
    """The value of a header that must come once ('' when absent); a repeat is a 400."""
    found = values.get(name, ())
    equal_lengths = name == "content-length" and len({v.strip() for v in found}) == 1
    if len(found) > 1 and name in SINGLE and not equal_lengths:
        raise RepeatedHeader(Wording.REPEATED_HEADER.format(header=name.title()))
    return found[0] if found else ""


def _unquoted(value: str) -> str:
    """``value`` without its quoted strings (a quoted boundary may hold a comma)."""
    out, quoted, escaped = [], False, False
    for char in value:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif not quoted:
            out.append(char)
    return "".join(out)


def _length(value: str) -> int | None:
    """``Content-Length`` as h11 and Django take it: a list of equal values is that value."""
    parts = {part.strip() for part in value.split(",")} if value else set()
    if len(parts) != 1:
        return None
    (part,) = parts
    return int(part) if part.isdigit() else None


def parse_digest(value: str, header: str = "Repr-Digest") -> str | None:
    """The SHA-256 in an RFC 9530 dictionary (``sha-256=:<base64>:``, among other
    algorithms perhaps) as lower-case hex; None when it names only other algorithms.
    Two different sha-256 members (repeated headers joined by a server) are a 400."""
    found = None
    if not value.strip():
        return None
    for member in value.split(","):
        name, sep, item = member.strip().partition("=")
        if not sep or not name:
            raise BadDigest(Wording.DIGEST_LIST.format(header=header))
        if name.strip().lower() != SHA256:
            continue
        item = item.strip()
        if len(item) < 2 or item[0] != ":" or item[-1] != ":":
            raise BadDigest(Wording.DIGEST_FORM.format(header=header))
        try:
            raw = base64.b64decode(item[1:-1], validate=True)
        except (binascii.Error, ValueError):
            raise BadDigest(Wording.DIGEST_BASE64.format(header=header)) from None
        if len(raw) != 32:
            raise BadDigest(Wording.DIGEST_LENGTH.format(header=header))
        if found is not None and found != raw.hex():
            raise RepeatedHeader(Wording.TWO_SHA256.format(header=header))
        found = raw.hex()
    return found


def format_digest(sha256_hex: str) -> str:
    """``sha-256=:<base64>:`` for a hex SHA-256: what a client sends."""
    return f"{SHA256}=:{base64.b64encode(bytes.fromhex(sha256_hex)).decode()}:"
