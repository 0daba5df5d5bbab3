"""System checks (ids ``django_pdfpool.E001``...): of the settings, the routes, the host
and the server, each said in its function."""

from __future__ import annotations

import ast
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage

from .conf import RedisSettings, get_settings, problems, raw_setting, table_of


@checks.register()
def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """The problems on which ``get_settings()`` raises too."""
    return problems(raw_setting())


@checks.register(checks.Tags.urls)
def check_integrations(**kwargs: Any) -> list[CheckMessage]:
    """W101: a DRF or ninja route pooled by ``django_pdfpool.pdf_pooled`` (docs/drf.md);
    no ROOT_URLCONF, no routes (as Django's own URL check)."""
    from .record import framework_mismatches

    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    return [
        checks.Warning(
            f"The route {route} is a {integration.rsplit('.', 1)[1]} view pooled by "
            "django_pdfpool.pdf_pooled: its refusals bypass the framework's exception handlers.",
            hint=f"Use {integration}.pdf_pooled on the handler or operation.",
            id="django_pdfpool.W101",
        )
        for route, integration in framework_mismatches()
    ]


@checks.register()
def check_sandbox(**kwargs: Any) -> list[CheckMessage]:
    """W021 for each sandbox layer this host lacks (a probe child says), and E021 when that
    is below SANDBOX['REQUIRE']: extractions are then refused."""
    from .sandbox.extract import sandbox_layers

    if problems(raw_setting()):
        return []  # check_settings reports them
    get_settings().sandbox.configure()
    found = sandbox_layers()
    messages: list[CheckMessage] = [
        checks.Warning(
            f"The extraction sandbox lacks the layer {layer!r}: {why}.",
            hint="See docs/security.md for what each layer stops and how to get it.",
            id="django_pdfpool.W021",
        )
        for layer, why in found.missing.items()
        if found.enabled
    ]
    if not found.enabled:
        msg = "PDFPOOL['SANDBOX']['LAYERS'] is False: no extraction child confines itself."
        hint = "Set it to True outside an engine's debugging (docs/security.md)."
        messages.append(checks.Warning(msg, hint=hint, id="django_pdfpool.W021"))
    if not found.sufficient:
        gives = f"this host gives {found.level!r}" if found.enabled else "LAYERS is False"
        msg = (
            f"PDFPOOL['SANDBOX']['REQUIRE'] is {found.required!r} but {gives}: every "
            "extraction will be refused (503)."
        )
        hint = "Lower SANDBOX['REQUIRE'], or run where the missing layers are offered."
        if not found.enabled:
            hint = "Set SANDBOX['LAYERS'] to True (or REQUIRE to 'none', for debugging only)."
        messages.append(checks.Error(msg, hint=hint, id="django_pdfpool.E021"))
    return messages


@checks.register()
def check_redis_namespace(**kwargs: Any) -> list[CheckMessage]:
    """W001: the Redis pool with the default NAMESPACE, which other deployments on the same
    Redis would share (they are refused, not merged: docs/cluster.md)."""
    raw = raw_setting()
    redis = raw.get("REDIS") if isinstance(raw, dict) else None
    default = table_of(RedisSettings)["NAMESPACE"].default
    if not isinstance(redis, dict) or redis.get("NAMESPACE", default) != default:
        return []
    msg = (
        f"PDFPOOL['REDIS'] has the default NAMESPACE {default!r}: another deployment on the "
        "same Redis with the defaults would be refused (PoolMisconfigured) while yours runs, "
        "or refuse yours."
    )
    hint = "Give each deployment a NAMESPACE of its own, e.g. 'myproject-pdf'."
    return [checks.Warning(msg, hint=hint, id="django_pdfpool.W001")]


@checks.register()
def check_memory(**kwargs: Any) -> list[CheckMessage]:
    """W031: SLOTS x MEMORY_LIMIT plus this process exceed the memory it may use (its
    cgroup's limit, else the machine's): jobs at their limit would meet the OOM killer."""
    from .status.envelope import envelope

    if problems(raw_setting()):
        return []  # check_settings reports them
    conf = get_settings()
    memory = envelope(conf.slots, conf.memory_limit)
    if memory["fits"]:
        return []
    msg = (
        f"SLOTS x MEMORY_LIMIT ({conf.slots} x {conf.memory_limit >> 20} MiB) plus this "
        f"server ({memory['server_rss'] >> 20} MiB) exceed the {memory['allowed'] >> 20} MiB "
        f"it may use ({memory['allowed_by']})."
    )
    hint = "Lower SLOTS or MEMORY_LIMIT; `manage.py pdfpool status` shows what jobs peak at."
    return [checks.Warning(msg, hint=hint, id="django_pdfpool.W031")]


def _runserver_without_threads() -> bool:
    """Django's own runserver told ``--nothreading`` (argparse takes ``--not...`` for it);
    daphne's runserver serves each request on its event loop, threads or not."""
    from django.core.management import get_commands

    if sys.argv[1:2] != ["runserver"] or get_commands().get("runserver") == "daphne":
        return False
    return any(len(arg) > 4 and "--nothreading".startswith(arg) for arg in sys.argv[2:])


@checks.register()
def check_server(**kwargs: Any) -> list[CheckMessage]:
    """W041: the server serves one request at a time per process (runserver --nothreading,
    gunicorn's sync worker with one thread), as far as this process can see it."""
    if _runserver_without_threads():
        server = "runserver --nothreading"
    elif _gunicorn_is_serial():
        server = "gunicorn's sync worker with one thread"
    else:
        return []
    msg = (
        f"{server} serves one request at a time per process: no two uploads meet in the "
        "pool's slots, so identical uploads are each extracted, and one caller's second "
        "upload is never refused (429)."
    )
    hint = "Serve with threads (gunicorn --threads 4) or under ASGI: see docs/deployment.md."
    return [checks.Warning(msg, hint=hint, id="django_pdfpool.W041")]


def _gunicorn_is_serial() -> bool:
    """Whether gunicorn serves this project with its sync worker (one thread): its settings
    as gunicorn reads them (config file, GUNICORN_CMD_ARGS, its command line if ours)."""
    try:
        from gunicorn.config import Config, get_default_config_file  # type: ignore[import-untyped]
    except ImportError:
        return False
    ours = "gunicorn" in (Path(sys.argv[0]).name, Path(sys.argv[0]).parent.name)
    config = Config()
    parser = config.parser()
    try:
        command = parser.parse_known_args(sys.argv[1:] if ours else [])[0]
        env = parser.parse_known_args(config.get_cmd_args_from_env())[0]
        path = command.config or env.config or get_default_config_file()
        if not (ours or path or "GUNICORN_CMD_ARGS" in os.environ):
            return False  # nothing says gunicorn serves this project
        found = _config_literals(path) if path else {}
        if found is None:
            return False  # the file decides the worker in code: cannot tell
        for name, value in [*found.items(), *vars(env).items(), *vars(command).items()]:
            if name in config.settings and value is not None:
                config.set(name, value)
    except (Exception, SystemExit):  # settings gunicorn itself would refuse: not ours to judge
        return False
    return config.worker_class_str in ("sync", "gunicorn.workers.sync.SyncWorker")


def _config_literals(path: str) -> dict[str, Any] | None:
    """A gunicorn config file's literal top-level assignments, read and never run; None when
    its code may set the worker otherwise (a computed value, a branch, an import)."""
    if path.startswith("python:"):
        return None  # a module: importing it would run it
    tree = ast.parse(Path(path.removeprefix("file:")).read_bytes(), path)
    found: dict[str, Any] = {}
    literal: set[ast.AST] = set()
    for statement in tree.body:
        if not isinstance(statement, ast.Assign | ast.AnnAssign) or statement.value is None:
            continue
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        with contextlib.suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            value = ast.literal_eval(statement.value)  # not a literal: not taken
            names = [target for target in targets if isinstance(target, ast.Name)]
            found |= {target.id: value for target in names}
            literal.update(names)
    for node in ast.walk(tree):  # what decides the worker, bound otherwise
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node not in literal:
            bound = node.id
        elif isinstance(node, ast.alias):
            bound = node.asname or node.name  # "*" binds anything
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound = node.name
        else:
            continue
        if bound in ("worker_class", "threads", "*"):
            return None
    return found
