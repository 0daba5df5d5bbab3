"""System checks for the PDFPOOL setting (ids ``django_pdfpool.E001``...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from .conf import problems, raw_setting


@checks.register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Every problem of the PDFPOOL setting as a system-check error; ``conf.problems``
    finds them, and ``get_settings()`` raises on the same ones where checks do not run."""
    return [
        checks.Error(problem.msg, hint=problem.hint or None, id=problem.id)
        for problem in problems(raw_setting())
    ]
