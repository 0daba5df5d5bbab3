"""System checks for the PDFPOOL setting (ids ``django_pdfpool.E001``...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from .conf import RedisSettings, problems, raw_setting, table_of


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
    from .door import framework_mismatches

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


@checks.register()
def check_sandbox(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W021 for each sandbox layer this host does not give a job's child; E021 when that
    falls below SANDBOX['REQUIRE'] (extractions are then refused). Asks a probe child once."""
    from .conf import get_settings
    from .sandbox.extract import configure, sandbox_layers

    if problems(raw_setting()):
        return []  # check_settings reports them
    conf = get_settings()
    configure(
        sandbox=conf.sandbox.layers, require=conf.sandbox.require, child_env=conf.sandbox.child_env
    )
    found = sandbox_layers()
    messages: list[checks.CheckMessage] = [
        checks.Warning(
            f"The extraction sandbox lacks the layer {layer!r}: {why}.",
            hint="See docs/security.md for what each layer stops and how to get it.",
            id="django_pdfpool.W021",
        )
        for layer, why in found.missing.items()
    ]
    if not found.sufficient:
        messages.append(
            checks.Error(
                f"PDFPOOL['SANDBOX']['REQUIRE'] is {found.required!r} but this host gives "
                f"{found.level!r}: every extraction will be refused (503).",
                hint="Lower SANDBOX['REQUIRE'], or run where the missing layers are offered.",
                id="django_pdfpool.E021",
            )
        )
    return messages


@checks.register()
def check_redis_namespace(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W001: the Redis pool with the default NAMESPACE, which every deployment on the
    same Redis would share (they are refused, not merged: docs/cluster.md)."""
    raw = raw_setting()
    redis = raw.get("REDIS") if isinstance(raw, dict) else None
    default = table_of(RedisSettings)["NAMESPACE"].default
    if not isinstance(redis, dict) or redis.get("NAMESPACE", default) != default:
        return []
    return [
        checks.Warning(
            f"PDFPOOL['REDIS'] has the default NAMESPACE {default!r}: another deployment on "
            "the same Redis with the defaults would be refused (PoolMisconfigured) while "
            "yours runs, or refuse yours.",
            hint="Give each deployment a NAMESPACE of its own, e.g. 'myproject-pdf'.",
            id="django_pdfpool.W001",
        )
    ]
