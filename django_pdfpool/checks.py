"""System checks for the PDFPOOL setting (ids ``django_pdfpool.E001``...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from .conf import DEFAULTS, problems, raw_setting


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


@checks.register()
def check_redis_namespace(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W001: the Redis backend with the default NAMESPACE, which every deployment on the
    same Redis would share (they are refused, not merged: docs/cluster.md)."""
    raw = raw_setting()
    if not isinstance(raw, dict) or raw.get("BACKEND") != "redis":
        return []
    if raw.get("NAMESPACE", DEFAULTS["NAMESPACE"]) != DEFAULTS["NAMESPACE"]:
        return []
    return [
        checks.Warning(
            f"PDFPOOL['BACKEND'] is 'redis' with the default NAMESPACE "
            f"{DEFAULTS['NAMESPACE']!r}: another deployment on the same Redis with the "
            "defaults would be refused (PoolMisconfigured) while yours runs, or refuse yours.",
            hint="Give each deployment a NAMESPACE of its own, e.g. 'myproject-pdf'.",
            id="django_pdfpool.W001",
        )
    ]
