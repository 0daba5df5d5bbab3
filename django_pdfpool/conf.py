"""The PDFPOOL setting: one table of its keys, the validation, and one cached accessor.

Each key is declared once, as a field of ``PoolSettings`` made by ``setting()``: its
default, its check (a ``bounds.Bound``, the lower layer's own where the value becomes an
argument there), one line of help and its section of the settings page. ``DEFAULTS``,
``SETTINGS``, ``problems()`` and docs/settings.md (mkdocs_hooks.py) are all made from
those fields. ``get_settings()`` merges the project's ``PDFPOOL`` dict over the defaults
and validates it; the cache resets on ``setting_changed`` so ``override_settings`` works.
The same ``problems()`` feed the system checks and ``get_settings()``, because checks do
not run in deployment.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .admission import pool_limits as pool
from .admission.redis import options as redis
from .bounds import FLAG, Bound, MiB, integer, one_of, seconds
from .sandbox import job_limits as job
from .sandbox.wire import DEFAULT_NICE

__all__ = [
    "DEFAULTS", "SECTIONS", "SETTINGS", "PoolSettings", "Problem", "Setting", "get_settings",
    "problems", "raw_setting", "setting", "table_of",
]  # fmt: skip

BACKENDS = ("local", "redis")

# the settings page's sections (docs/settings.md has a heading and a table for each)
LIMITS, EXTRACTION, CALLERS, DOOR, CLUSTER = "limits", "extraction", "callers", "door", "redis"
SECTIONS = (LIMITS, EXTRACTION, CALLERS, DOOR, CLUSTER)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the setting; ``id`` is the system check's id."""

    id: str
    msg: str
    hint: str = ""


More = Callable[[str, Any, Mapping[str, Any]], list["Problem"]]
"""``more(key, value, raw)``: problems a valid-looking value still has (E004...)."""


@dataclass(frozen=True)
class Setting:
    """One key of PDFPOOL as the table declares it."""

    default: Any
    check: Bound  # a value that fails it is E003 "PDFPOOL[key] must be <expected>"
    help: str  # the settings page's "meaning" (Markdown, one line, no "|")
    section: str  # of SECTIONS
    convert: Callable[[Any], Any]  # a valid value -> the PoolSettings attribute
    more: More | None  # what the check cannot see: an import, an extra, a URL


def _same(value: Any) -> Any:
    return value


def setting(
    default: Any,
    check: Bound,
    help: str,
    section: str,
    *,
    convert: Callable[[Any], Any] = _same,
    more: More | None = None,
) -> Any:
    """A field of ``PoolSettings``: one PDFPOOL key, named as the field in capitals."""
    assert section in SECTIONS, section
    declared = Setting(default, check, help, section, convert, more)
    return field(metadata={"setting": declared})


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _imported(value: Any) -> Any:
    return import_string(value) if isinstance(value, str) else value


def _addresses(value: Any) -> tuple[tuple[str, int], ...]:
    """``["host:port", ...]`` (or None) as ``((host, port), ...)``; ``[::1]`` loses its brackets."""
    pairs = (address.rpartition(":") for address in value or ())
    return tuple((host.strip("[]"), int(port)) for host, _, port in pairs)


def _is_address(value: Any) -> bool:
    """``host:port`` with a port number (a Sentinel's address)."""
    if not isinstance(value, str):
        return False
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _dotted(takes: str) -> More:
    """E004 for a dotted path that cannot be imported (a callable is taken as it is)."""

    def more(key: str, path: Any, raw: Mapping[str, Any]) -> list[Problem]:
        if not isinstance(path, str):
            return []
        try:
            import_string(path)
        except ImportError as exc:
            return [
                Problem(
                    "django_pdfpool.E004",
                    f"PDFPOOL[{key!r}] = {path!r} cannot be imported: {exc}",
                    f"Give the dotted path of a function taking {takes}.",
                )
            ]
        return []

    return more


def _engine_installed(key: str, engine: Any, raw: Mapping[str, Any]) -> list[Problem]:
    if engine != "pypdfium2" or _importable("pypdfium2"):
        return []
    return [
        Problem(
            "django_pdfpool.E005",
            "PDFPOOL['ENGINE'] is 'pypdfium2' but pypdfium2 is not installed.",
            "pip install 'django-pdfpool[pdfium]'",
        )
    ]


def _redis_backend(key: str, backend: Any, raw: Mapping[str, Any]) -> list[Problem]:
    return _redis_problems(raw.get("REDIS_URL")) if backend == "redis" else []


CALLABLE = Bound(lambda v: isinstance(v, str) or callable(v), "a dotted path or a callable")
SECONDS = seconds(above=0)
DIRECTORY = Bound(
    lambda v: v is None or (isinstance(v, str) and os.path.isdir(v)),
    "None or an existing directory",
)
DEPLOYMENT_NAME = Bound(
    lambda v: v is None or (isinstance(v, str) and 0 < len(v) <= 200), "None or a non-empty string"
)


@dataclass(frozen=True)
class PoolSettings:
    """The validated, merged PDFPOOL setting, and the table of its keys: each field is one
    key (its name in capitals), declared once with its default, check, help and section."""

    # -- limits: what one process admits, and what one job may take
    slots: int = setting(
        2,
        pool.SLOTS,
        "extractions running at once in this process. Each may use up to `MEMORY_LIMIT`: "
        "budget `SLOTS x MEMORY_LIMIT` plus the server.",
        LIMITS,
    )
    queue: int = setting(
        4,
        pool.QUEUE,
        "extractions waiting for a slot. With `0`, an upload arriving while every slot is "
        "taken gets 503 at once.",
        LIMITS,
    )
    wait: float | None = setting(
        10.0,
        pool.WAIT,
        "seconds a queued extraction may wait for a slot, then every client sharing it gets "
        "503 (`None`: wait as long as it takes).",
        LIMITS,
        convert=_float,
    )
    timeout: float = setting(
        30.0,
        job.TIMEOUT,
        "seconds one extraction may run; the child's process group is killed at the deadline "
        "and the clients get 422 `too_complex`.",
        LIMITS,
        convert=float,
    )
    memory_limit: int = setting(
        512 * MiB,
        integer(128 * MiB, unit="bytes"),  # above sandbox.job_limits.MEMORY_LIMIT: see the help
        "bytes of address space for one child (`RLIMIT_AS`); a PDF that needs more gets 422 "
        "`too_large`. A child with pypdf imported already maps about 45 MiB.",
        LIMITS,
    )
    max_upload_size: int = setting(
        50 * MiB,
        integer(1, unit="bytes"),
        "bytes; a larger upload gets 413 before any work (checked from `Content-Length` "
        "before the body is parsed, then from the file's size). Django's own upload handlers "
        "still apply.",
        LIMITS,
    )
    max_pages: int | None = setting(
        None,
        job.MAX_PAGES,
        "extract at most this many pages; the rest are cut off and `Extraction.truncated` is "
        "`True` (`None`: every page).",
        LIMITS,
    )
    max_text_bytes: int = setting(
        8 * MiB,
        integer(1024, unit="bytes"),  # above sandbox.job_limits.MAX_TEXT_BYTES: a useful floor
        "bytes of text (UTF-8) one extraction may return. The child cuts the text there "
        "(`truncated` and `text_truncated` are `True`) and the parent reads at most this plus "
        'about 1.6 MiB of answer, so one hostile PDF cannot grow the server: a 17 KB "text '
        'bomb" of 64 MB of text costs the parent about 12 MiB.',
        LIMITS,
    )
    # -- extraction: how and where a job's child runs
    engine: str = setting(
        "pypdf",
        job.ENGINE,
        '`"pypdf"`, or `"pypdfium2"` with the `[pdfium]` extra (much faster; see '
        "[security](security.md) for its different failure modes).",
        EXTRACTION,
        more=_engine_installed,
    )
    warm_children: bool = setting(
        True,
        FLAG,
        "one template process (interpreter up, pypdf imported and run once) forks each job's "
        "child in about a millisecond, instead of a new interpreter paying about 100 ms of "
        "start-up; `False`: every job starts a new interpreter. Each child still does one job "
        "and exits; a template that dies is restarted, jobs meanwhile start cold.",
        EXTRACTION,
    )
    child_nice: int = setting(
        DEFAULT_NICE,
        job.CHILD_NICE,
        "how much lower than the server's own the extraction children's CPU priority is: "
        "added to the server's nice value (0: the same; the sum is capped at 19). Higher keeps "
        "the server answering while it extracts; on a host whose CPUs other work at the "
        "server's priority keeps busy, it also slows jobs towards their `TIMEOUT` (19: a share "
        "of 1 to 68 against each such process; 5: 1 to 3). See "
        "[performance](performance.md#the-childrens-nice-value-session-7).",
        EXTRACTION,
    )
    temp_dir: str | None = setting(
        None,
        DIRECTORY,
        "where uploads are staged for their job (`None`: the system's temporary directory). "
        "One per host: copies are named `pdfpool-<pid>-*.pdf` and those of dead processes are "
        "removed at start-up ([deployment](deployment.md#staged-uploads-after-a-crash)).",
        EXTRACTION,
    )
    child_env: tuple[str, ...] = setting(
        (),
        job.CHILD_ENV,
        "names of environment variables the extraction children inherit besides the minimum "
        "(`PATH`, `LANG`, `LC_*`, `LD_LIBRARY_PATH`, `PYTHONHOME`, `PYTHONPATH`, "
        "`PYTHONUSERBASE`, `PYTHONNOUSERSITE`). Nothing else of the server's environment "
        "(secret keys, database URLs) reaches a child.",
        EXTRACTION,
        convert=tuple,
    )
    sandbox: bool = setting(
        True,
        FLAG,
        "each extraction child confines itself with every layer this host offers (no new "
        "privileges, not dumpable, namespaces, Landlock, seccomp: "
        "[security](security.md#the-childs-sandbox)); `False` turns them all off (for "
        "debugging an engine only: a hostile PDF's code could then reach the server's "
        "processes, files and network).",
        EXTRACTION,
    )
    sandbox_require: str = setting(
        "none",
        job.REQUIRE,
        "the sandbox level below which extractions are refused (fail closed: 503 "
        '`sandbox_unavailable`, the reason logged at ERROR, system check E021): `"none"`, '
        '`"basic"` (no new privileges, not dumpable, seccomp), `"landlock"` (and '
        'Landlock\'s file system, TCP and signal rules) or `"full"` (and new user, network '
        "and IPC namespaces). A missing layer is warning W021 whatever this says.",
        EXTRACTION,
    )
    # -- callers and answers
    caller: Callable[..., Any] = setting(  # noqa: RUF009 - setting() is a dataclasses.field
        "django_pdfpool.callers.user_or_ip",
        CALLABLE,
        "dotted path (or callable) from a request to a caller id for the one-job-per-caller "
        "rule ([callers](installation.md#callers)).",
        CALLERS,
        convert=_imported,
        more=_dotted("the request"),
    )
    ipv6_prefix: int = setting(
        64,
        integer(1, 128),
        "anonymous IPv6 callers are one caller per network of this prefix length "
        "([callers](installation.md#callers)).",
        CALLERS,
    )
    refusal_view: Callable[..., Any] = setting(  # noqa: RUF009 - as caller
        "django_pdfpool.responses.default_refusal_view",
        CALLABLE,
        "dotted path (or callable) of `view(request, exception) -> HttpResponse`, for every "
        "answer given in a view's place (400, 413, 422, 429, 503) by the decorator, the "
        "middleware and the door ([usage](usage.md#answers-the-view-never-sees)). A "
        "decorator's `answer=` overrides it for that view.",
        CALLERS,
        convert=_imported,
        more=_dotted("the request and the exception"),
    )
    # -- the door: admission from the headers, before the body (docs/door.md)
    door: bool = setting(
        True,
        FLAG,
        "decide on uploads to `@pdf_pooled` views from their headers, before their bodies "
        "are read ([the door](door.md)).",
        DOOR,
    )
    door_budget: int = setting(
        64,
        integer(0),
        "with every place taken, bodies the door lets in because they may join a job in "
        "flight (one per caller); past it the door sheds from the headers and counts it apart "
        "([the door](door.md#joins-and-the-budget)).",
        DOOR,
    )
    door_budget_bytes: int = setting(
        64 * MiB,
        integer(0, unit="bytes"),
        "the declared bytes of those bodies together (a chunked body counts as the whole limit).",
        DOOR,
    )
    door_digests: bool = setting(
        True,
        FLAG,
        "the door answers from a declared digest (at once: it joins, or 503/429); `False`: "
        "it reads the body instead ([what the answer reveals]"
        "(security.md#what-the-doors-answer-reveals)). Digests are verified either way.",
        DOOR,
    )
    body_timeout: float = setting(
        20.0,
        SECONDS,
        "seconds a body let in by the door has to arrive, plus one per `BODY_MIN_RATE` bytes "
        "received; past it, 408 and its place goes back "
        "([nobody holds the door](door.md#nobody-holds-the-door)).",
        DOOR,
        convert=float,
    )
    body_min_rate: int = setting(
        500,
        integer(1, unit="bytes a second"),
        "bytes a second that earn a body another second: Apache mod_reqtimeout's "
        "`body=20,MinRate=500`.",
        DOOR,
    )
    body_timeout_max: float = setting(
        300.0,
        SECONDS,
        "seconds a body has in all, however fast it comes: the most a trickle just above "
        "`BODY_MIN_RATE` holds a place; mod_reqtimeout's `body=20-300`.",
        DOOR,
        convert=float,
    )
    # -- several worker processes or hosts: the same limits in Redis (docs/cluster.md)
    backend: str = setting(
        "local",
        one_of(BACKENDS),
        '`"local"`: each process has its own pool. `"redis"`: every process sharing '
        "`REDIS_URL` and `NAMESPACE` is one pool ([several workers and hosts](cluster.md)); "
        "needs the `[redis]` extra.",
        CLUSTER,
        more=_redis_backend,
    )
    redis_url: str | None = setting(
        None,
        Bound(lambda v: v is None or isinstance(v, str), "a redis:// URL, or None"),
        '`redis://`, `rediss://` or `unix://` URL; required with `BACKEND="redis"` (E007).',
        CLUSTER,
    )
    namespace: str = setting(
        "pdfpool",
        redis.NAMESPACE,
        "prefix of the pool's Redis keys: one namespace, one set of limits.",
        CLUSTER,
    )
    lease: float = setting(
        5.0,
        redis.LEASE,
        "seconds after which a process that stopped renewing (killed, hung) loses its slots, "
        "queue places and caller holds; its sharers get 503.",
        CLUSTER,
        convert=float,
    )
    redis_fallback: str = setting(
        "refuse",
        redis.FALLBACK,
        'while Redis fails: `"refuse"` new work with 503, or `"local"`: run it in this '
        "process's own pool (a warning is logged).",
        CLUSTER,
    )
    redis_timeout: float = setting(
        1.0,
        redis.CALL_TIMEOUT,
        "seconds a Redis call may take before Redis counts as failing.",
        CLUSTER,
        convert=float,
    )
    redis_sentinels: tuple[tuple[str, int], ...] = setting(
        None,
        Bound(
            lambda v: (
                v is None or (isinstance(v, list | tuple) and bool(v) and all(map(_is_address, v)))
            ),
            'None or a non-empty list of "host:port" strings',
        ),
        '`["host:port", ...]`: find the primary through Redis Sentinel; `REDIS_URL`\'s host '
        "is then the service name "
        "([reaching Redis](cluster.md#reaching-redis-tls-acl-users-sentinel)).",
        CLUSTER,
        convert=_addresses,
    )
    deployment: str | None = setting(
        None,
        DEPLOYMENT_NAME,
        "a name telling this deployment from others on the same Redis and `NAMESPACE`, which "
        "are refused rather than merged; `None`: derived from `SECRET_KEY` (an HMAC, never "
        "the key). Check `W001` warns of the default `NAMESPACE` with Redis.",
        CLUSTER,
    )

    def deployment_tag(self) -> str:
        """What tells this deployment from another sharing its Redis and namespace (the
        Redis pool refuses to merge them): an HMAC of a fixed label under SECRET_KEY, or
        under DEPLOYMENT when it is set. Never the secret itself."""
        from django.utils.crypto import salted_hmac

        secret = self.deployment  # None: SECRET_KEY
        return salted_hmac("django_pdfpool.redis", "deployment", secret=secret).hexdigest()[:32]

    def results_tag(self) -> str:
        """A short digest of the settings that change what the default job returns (its
        outcome too: a limit can turn a result into too_large or too_complex): part of its
        single-flight key, and the same in every process sharing a Redis namespace."""
        values = (self.engine, self.max_pages, self.max_text_bytes, self.memory_limit, self.timeout)
        return hashlib.sha256(repr(values).encode()).hexdigest()[:12]


def table_of(cls: type[Any]) -> dict[str, Setting]:
    """The PDFPOOL keys a settings dataclass declares with ``setting()``, in its order."""
    return {f.name.upper(): f.metadata["setting"] for f in fields(cls) if "setting" in f.metadata}


SETTINGS = table_of(PoolSettings)
"""The table: every PDFPOOL key and its declaration, in the order of ``PoolSettings``."""

DEFAULTS: dict[str, Any] = {key: declared.default for key, declared in SETTINGS.items()}


def raw_setting() -> Any:
    return getattr(settings, "PDFPOOL", {})


def problems(raw: Any) -> list[Problem]:
    """Everything wrong with a PDFPOOL value, as system-check problems."""
    if not isinstance(raw, dict):
        return [
            Problem("django_pdfpool.E001", f"PDFPOOL must be a dict, not {type(raw).__name__}.")
        ]
    found = [
        Problem(
            "django_pdfpool.E002",
            f"PDFPOOL has an unknown key {key!r}.",
            "Known keys: " + ", ".join(SETTINGS) + ".",
        )
        for key in raw
        if key not in SETTINGS
    ]
    for key, declared in SETTINGS.items():
        if key not in raw:
            continue
        value = raw[key]
        if not declared.check(value):
            message = f"PDFPOOL[{key!r}] must be {declared.check.expected}, not {value!r}."
            found.append(Problem("django_pdfpool.E003", message))
        elif declared.more is not None:
            found.extend(declared.more(key, value, raw))
    return found


def _redis_problems(url: Any) -> list[Problem]:
    if not _importable("redis"):
        hint = "pip install 'django-pdfpool[redis]'"
        return [
            Problem(
                "django_pdfpool.E006",
                "PDFPOOL['BACKEND'] is 'redis' but redis-py is not installed.",
                hint,
            )
        ]
    from redis.connection import parse_url

    try:
        parse_url(url if isinstance(url, str) else "")  # type: ignore[no-untyped-call]
    except ValueError:
        from .admission.redis.urls import presentable

        shown = presentable(url) if isinstance(url, str) else f"a {type(url).__name__}"
        shown = "None" if url is None else shown
        return [
            Problem(
                "django_pdfpool.E007",
                "PDFPOOL['REDIS_URL'] must be a redis://, rediss:// or unix:// URL "
                f"when BACKEND is 'redis', not {shown}.",
                "For example redis://127.0.0.1:6379/0",
            )
        ]
    return []


@functools.cache
def get_settings() -> PoolSettings:
    """The validated settings; raises ImproperlyConfigured naming every problem."""
    raw = raw_setting()
    found = problems(raw)
    if found:
        raise ImproperlyConfigured(" ".join(f"[{p.id}] {p.msg}" for p in found))
    values = {
        key.lower(): declared.convert(raw.get(key, declared.default))
        for key, declared in SETTINGS.items()
    }
    return PoolSettings(**values)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "PDFPOOL":
        get_settings.cache_clear()
