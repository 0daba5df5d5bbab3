"""System checks for the PDFPOOL setting (ids ``django_pdfpool.E001``...)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from .conf import problems, raw_setting


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Report every problem of the PDFPOOL setting as a system-check error."""
    return [
        checks.Error(problem.msg, hint=problem.hint or None, id=problem.id)
        for problem in problems(raw_setting())
    ]
