"""Helpers of the door's tests: headers, pressure, a decision."""

from __future__ import annotations

import hashlib

from django.test import Client

from django_pdfpool.admission.ledger import Pressure
from django_pdfpool.door import Arrivals, Terms, decide
from django_pdfpool.record import UploadHeaders

MiB = 1024 * 1024


JSON = {"HTTP_ACCEPT": "application/json"}


SOON = 30


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def headers(**values: str) -> UploadHeaders:
    return UploadHeaders.of({name.replace("_", "-"): value for name, value in values.items()})


def pressure(
    closed=False, free=1, in_flight=False, retry_after=2.5, caller_busy=False, caller_retry=9.0
) -> Pressure:
    return Pressure(closed, free, in_flight, retry_after, caller_busy, caller_retry)


TERMS = Terms(
    max_upload_size=MiB, budget=4, budget_bytes=10 * MiB, body_timeout=20, body_min_rate=500
)


def decided(upload, state, arrivals=None, key=None, who="ip:10.0.0.1", known=True, terms=TERMS):
    arrivals = arrivals if arrivals is not None else Arrivals()
    return decide(upload, key, state, arrivals, who=who, known=known, terms=terms)


def verdict(*args, **kwargs):
    return decided(*args, **kwargs)[0]


def post(url, data, ip="10.0.0.1", **extra):
    return Client(REMOTE_ADDR=ip).post(url, {"file": pdfs_upload(data)}, **JSON, **extra)


def pdfs_upload(data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")
