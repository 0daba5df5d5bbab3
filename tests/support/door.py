"""Helpers of the door's tests: headers, pressure, a decision, an upload through ``PdfPoolDoor``."""

from __future__ import annotations

import hashlib
from typing import Any

from asgiref.testing import ApplicationCommunicator
from django.test import Client

from django_pdfpool.admission.ledger import Pressure
from django_pdfpool.door import Arrivals, Terms, decide
from django_pdfpool.record import UploadHeaders

MiB = 1024 * 1024


JSON = {"HTTP_ACCEPT": "application/json"}


SOON = 30


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MINE, THEIRS = b"%PDF-1.4\n" + b"x" * 300, b"%PDF-1.4\n" + b"y" * 300  # theirs: in flight
FORM_TYPE = "multipart/form-data; boundary=b"  # what ``form`` makes


def form(data: bytes, field: str = "file") -> bytes:
    """``data`` as the PDF in the file field ``field`` of a ``FORM_TYPE`` body."""
    head = f'--b\r\nContent-Disposition: form-data; name="{field}"; filename="a.pdf"\r\n'
    return head.encode() + b"Content-Type: application/pdf\r\n\r\n" + data + b"\r\n--b--\r\n"


def headers(**values: str) -> UploadHeaders:
    return UploadHeaders.of({name.replace("_", "-"): value for name, value in values.items()})


def pressure(
    closed=False, free=1, in_flight=False, retry_after=2.5, caller_busy=False, caller_retry=9.0
) -> Pressure:
    return Pressure(closed, free, in_flight, retry_after, caller_busy, caller_retry)


TERMS = Terms(
    max_upload_size=MiB, budget=4, budget_bytes=10 * MiB, body_timeout=20, body_min_rate=500
)


def decided(
    upload, state, arrivals=None, key=None, who="ip:10.0.0.1", known=True, terms=TERMS,
    framework=True,
):  # fmt: skip
    """``decide``'s answer; by default for a framework's route, whose parsers may take a body
    of any type (``@pdf_pooled``'s own refuses one that holds no PDF: ``framework=False``)."""
    arrivals = arrivals if arrivals is not None else Arrivals()
    return decide(
        upload, key, state, arrivals, who=who, known=known, terms=terms, framework=framework
    )


def verdict(*args, **kwargs):
    return decided(*args, **kwargs)[0]


def post(url, data, ip="10.0.0.1", **extra):
    return Client(REMOTE_ADDR=ip).post(url, {"file": pdfs_upload(data)}, **JSON, **extra)


def pdfs_upload(data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")


def asgi_post(
    path: str,
    body: bytes,
    *headers: tuple[bytes, bytes],
    host: bytes = b"testserver",
    root_path: str = "",
    query: bytes = b"",
) -> dict[str, Any]:
    """The scope of a raw PDF upload of ``body`` to ``path``, with ``headers`` besides."""
    sent = [(b"host", host), (b"content-type", b"application/pdf"), *headers]
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": root_path + path, "raw_path": (root_path + path).encode(),
        "query_string": query, "root_path": root_path, "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80), "headers": [*sent, (b"content-length", b"%d" % len(body))],
    }  # fmt: skip


async def answer_of(
    app: Any, request: dict[str, Any], body: bytes, patience: float = SOON
) -> tuple[int, bytes, dict[bytes, bytes]]:
    """The status, whole body and headers ``app`` answers to ``request`` and its ``body``."""
    talk = ApplicationCommunicator(app, request)
    await talk.send_input({"type": "http.request", "body": body, "more_body": False})
    start, sent, more = await talk.receive_output(patience), b"", True
    while more:
        message = await talk.receive_output(patience)
        sent, more = sent + message.get("body", b""), message.get("more_body", False)
    await talk.wait(patience)
    assert talk.output_queue.empty()  # nothing after the last message
    return int(start["status"]), sent, dict(start["headers"])
