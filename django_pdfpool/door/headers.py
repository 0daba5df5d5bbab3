"""What the door reads of a request: its headers only, never a body byte.

``UploadHeaders.of`` takes the headers as lower-case names to values (ASGI's scope and
WSGI's environ are both turned into that), so the ASGI and WSGI adapters read alike.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

from ..exceptions import BadDigest

PDF_TYPE = "application/pdf"
RAW_DIGESTS = ("repr-digest", "content-digest")  # RFC 9530, for a raw PDF body
FILE_DIGEST = "pdf-digest"  # the same syntax, for the file field of a multipart form
SHA256 = "sha-256"


@dataclass(frozen=True)
class UploadHeaders:
    """An upload as its headers describe it."""

    declared_size: int | None  # Content-Length; None when absent (chunked) or unreadable
    chunked: bool  # Transfer-Encoding: chunked (no declared size)
    expects_continue: bool  # Expect: 100-continue: the client waits before the body
    raw: bool  # Content-Type: application/pdf, the body is the PDF itself
    digest: str | None  # the declared SHA-256 of the PDF, lower-case hex

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> UploadHeaders:
        """Read ``headers`` (lower-case names); a malformed digest raises ``BadDigest``."""
        length = headers.get("content-length", "").strip()
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        raw = content_type == PDF_TYPE
        names = RAW_DIGESTS if raw else (FILE_DIGEST,)
        digests = {parse_digest(headers[name], name) for name in names if headers.get(name)}
        if len(digests) > 1:
            raise BadDigest("The request declares two different digests for one PDF.")
        return cls(
            declared_size=int(length) if length.isdigit() else None,
            chunked="chunked" in headers.get("transfer-encoding", "").lower(),
            expects_continue=headers.get("expect", "").strip().lower() == "100-continue",
            raw=raw,
            digest=digests.pop() if digests else None,
        )


def parse_digest(value: str, header: str = "Repr-Digest") -> str | None:
    """The SHA-256 in an RFC 9530 dictionary (``sha-256=:<base64>:``, among other
    algorithms perhaps) as lower-case hex; None when it names only other algorithms."""
    found = None
    for member in value.split(","):
        name, sep, item = member.strip().partition("=")
        if not sep or not name:
            raise BadDigest(f"The {header} header is not a list of algorithm=:digest: pairs.")
        if name.strip().lower() != SHA256:
            continue
        item = item.strip()
        if len(item) < 2 or item[0] != ":" or item[-1] != ":":
            raise BadDigest(f"The {header} header's sha-256 must be :<base64>: (RFC 9530).")
        try:
            raw = base64.b64decode(item[1:-1], validate=True)
        except (binascii.Error, ValueError):
            raise BadDigest(f"The {header} header's sha-256 is not valid base64.") from None
        if len(raw) != 32:
            raise BadDigest(f"The {header} header's sha-256 is not 32 bytes long.")
        found = raw.hex()
    return found


def format_digest(sha256_hex: str) -> str:
    """``sha-256=:<base64>:`` for a hex SHA-256: what a client sends."""
    return f"{SHA256}=:{base64.b64encode(bytes.fromhex(sha256_hex)).decode()}:"
