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


@checks.register(checks.Tags.urls)
def check_integrations(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """A DRF or django-ninja route pooled by ``django_pdfpool.pdf_pooled``: a warning
    naming the integration to use (docs/drf.md, docs/ninja.md)."""
    from .door.views import framework_mismatches

    return [
        checks.Warning(
            f"The route {route} is a {integration.rsplit('.', 1)[1]} view pooled by "
            "django_pdfpool.pdf_pooled: its refusals bypass the framework's exception "
            "handlers.",
            hint=f"Use {integration}.pdf_pooled on the handler or operation.",
            id="django_pdfpool.W101",
        )
        for route, integration in framework_mismatches()
    ]
