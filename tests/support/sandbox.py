"""Helpers of the sandbox tests: running an extraction, children's state in /proc."""

from __future__ import annotations

import asyncio

from django_pdfpool import extract

LIMITS = {"timeout": 60.0, "memory_limit": 512 << 20}  # time: a loaded machine's


def run(source, **options):
    return asyncio.run(extract(source, **{**LIMITS, **options}))
