"""Helpers of the glue's upload tests: an upload, the staged directory's files."""

from __future__ import annotations

from django.core.files.uploadedfile import SimpleUploadedFile

JSON = {"HTTP_ACCEPT": "application/json"}


def upload(data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")
