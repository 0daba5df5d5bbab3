"""Template filters that format seconds and bytes as the pool's status page does
(``django_pdfpool.status.page.fmt``); ``upload.js`` formats the same way."""

from __future__ import annotations

from django import template

from django_pdfpool.status.page import fmt

register = template.Library()


@register.filter
def as_seconds(value: float | None) -> str:
    """``0.004`` -> ``4 ms``, ``2.5`` -> ``2.5 s``, ``None`` -> ``no limit``."""
    return fmt(value, "seconds")


@register.filter
def as_bytes(value: int) -> str:
    """``536870912`` -> ``512 MiB``."""
    return fmt(value, "bytes")
