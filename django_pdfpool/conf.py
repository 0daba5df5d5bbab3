"""The PDFPOOL setting: defaults, validation, and one cached accessor.

``get_settings()`` merges the project's ``PDFPOOL`` dict over the defaults and
validates it; the cache resets on ``setting_changed`` so ``override_settings``
works. The same ``problems()`` feed the system checks and ``get_settings()``,
because checks do not run in deployment.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .admission.redis.modes import FALLBACKS
from .sandbox.confine import LEVELS
from .sandbox.wire import ENGINES

MiB = 1024 * 1024

DEFAULTS: dict[str, Any] = {
    "SLOTS": 2,  # extractions at once
    "QUEUE": 4,  # extractions waiting for a slot
    "WAIT": 10.0,  # seconds a queued extraction may wait, then 503
    "TIMEOUT": 30.0,  # seconds one extraction may run (the child is killed after)
    "MEMORY_LIMIT": 512 * MiB,  # bytes of address space for one child
    "MAX_UPLOAD_SIZE": 50 * MiB,  # bytes; larger uploads get 413 before any work
    "MAX_PAGES": None,  # pages to extract at most (None: all); more are cut off
    "ENGINE": "pypdf",  # "pypdf", or "pypdfium2" with the [pdfium] extra
    "WARM_CHILDREN": True,  # keep a pre-started child so a job skips interpreter start-up
    "CALLER": "django_pdfpool.callers.user_or_ip",  # dotted path: request -> caller id
    # dotted path: (request, exception) -> HttpResponse, for every answer given in a view's
    # place (400, 413, 422, 429, 503), by the decorator, the middleware and the door alike
    "REFUSAL_VIEW": "django_pdfpool.responses.default_refusal_view",
    # the door: decide on uploads to @pdf_pooled views from their headers (docs/door.md)
    "DOOR": True,
    # the door, with every place taken: bodies let in that may join a job in flight (one
    # per caller), at most this many at once and this many bytes declared (docs/door.md)
    "DOOR_BUDGET": 64,
    "DOOR_BUDGET_BYTES": 64 * MiB,
    "DOOR_DIGESTS": True,  # the door answers from a declared digest (False: reads the body)
    # a body let in must arrive within BODY_TIMEOUT s, plus 1 s per BODY_MIN_RATE bytes,
    # or it gets 408 and its place goes back (Apache's mod_reqtimeout body=20,MinRate=500)
    "BODY_TIMEOUT": 20.0,
    "BODY_MIN_RATE": 500,
    "BODY_TIMEOUT_MAX": 300.0,  # ... and within this many seconds in all, however fast
    "TEMP_DIR": None,  # where uploads are staged for their job (None: the system's)
    "MAX_TEXT_BYTES": 8 * MiB,  # text (UTF-8) one job may return; more is cut, truncated
    "CHILD_ENV": (),  # names of environment variables children inherit besides the minimum
    "IPV6_PREFIX": 64,  # anonymous IPv6 callers are one caller per prefix of this length
    # children sandbox themselves with every layer the host offers (docs/security.md); False
    # turns every layer off. SANDBOX_REQUIRE: the level below which extractions are refused
    # (503 sandbox_unavailable): "none", "basic", "landlock" or "full"
    "SANDBOX": True,
    "SANDBOX_REQUIRE": "none",
    # Several worker processes or hosts: coordinate the same limits in Redis
    "BACKEND": "local",  # "local" (this process's pool) or "redis"
    "REDIS_URL": None,  # redis://host:port/db, required with BACKEND "redis"
    "NAMESPACE": "pdfpool",  # prefix of the pool's Redis keys; one per pool
    "LEASE": 5.0,  # seconds after which a dead process's slots and holds are freed
    "REDIS_FALLBACK": "refuse",  # Redis failing: "refuse" (503) or "local" (this process)
    "REDIS_TIMEOUT": 1.0,  # seconds a Redis call may take before Redis counts as failing
    "REDIS_SENTINELS": None,  # ["host:port", ...]: REDIS_URL's host is then the service name
    "DEPLOYMENT": None,  # tells deployments sharing a Redis apart; None: from SECRET_KEY
}

BACKENDS = ("local", "redis")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the setting; ``id`` is the system check's id."""

    id: str
    msg: str
    hint: str = ""


@dataclass(frozen=True)
class PoolSettings:
    """The validated, merged PDFPOOL setting."""

    slots: int
    queue: int
    wait: float | None
    timeout: float
    memory_limit: int
    max_upload_size: int
    max_pages: int | None
    engine: str
    warm_children: bool
    caller: Callable[..., Any]
    refusal_view: Callable[..., Any]
    door: bool
    door_budget: int
    door_budget_bytes: int
    door_digests: bool
    body_timeout: float
    body_min_rate: int
    body_timeout_max: float
    temp_dir: str | None
    max_text_bytes: int
    child_env: tuple[str, ...]
    ipv6_prefix: int
    sandbox: bool
    sandbox_require: str
    backend: str
    redis_url: str | None
    namespace: str
    lease: float
    redis_fallback: str
    redis_timeout: float
    redis_sentinels: tuple[tuple[str, int], ...]
    deployment: str | None

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_address(value: Any) -> bool:
    """``host:port`` with a port number (a Sentinel's address)."""
    if not isinstance(value, str):
        return False
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


# key -> (test of its type and range, what it must be)
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "SLOTS": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "QUEUE": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "WAIT": (lambda v: v is None or (_is_number(v) and v >= 0), "seconds >= 0, or None"),
    "TIMEOUT": (lambda v: _is_number(v) and v > 0, "seconds > 0"),
    # a child with pypdf imported already maps about 45 MiB of address space
    "MEMORY_LIMIT": (lambda v: _is_int(v) and v >= 128 * MiB, "bytes, an integer >= 128 MiB"),
    "MAX_UPLOAD_SIZE": (lambda v: _is_int(v) and v >= 1, "bytes, an integer >= 1"),
    "MAX_PAGES": (lambda v: v is None or (_is_int(v) and v >= 1), "an integer >= 1, or None"),
    "ENGINE": (lambda v: v in ENGINES, "one of " + ", ".join(map(repr, ENGINES))),
    "WARM_CHILDREN": (lambda v: isinstance(v, bool), "True or False"),
    "CALLER": (lambda v: isinstance(v, str) or callable(v), "a dotted path or a callable"),
    "REFUSAL_VIEW": (lambda v: isinstance(v, str) or callable(v), "a dotted path or a callable"),
    "DOOR": (lambda v: isinstance(v, bool), "True or False"),
    "DOOR_BUDGET": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "DOOR_BUDGET_BYTES": (lambda v: _is_int(v) and v >= 0, "bytes, an integer >= 0"),
    "DOOR_DIGESTS": (lambda v: isinstance(v, bool), "True or False"),
    "BODY_TIMEOUT": (lambda v: _is_number(v) and v > 0, "seconds > 0"),
    "BODY_MIN_RATE": (lambda v: _is_int(v) and v >= 1, "bytes a second, an integer >= 1"),
    "BODY_TIMEOUT_MAX": (lambda v: _is_number(v) and v > 0, "seconds > 0"),
    "BACKEND": (lambda v: v in BACKENDS, "one of " + ", ".join(map(repr, BACKENDS))),
    "REDIS_URL": (lambda v: v is None or isinstance(v, str), "a redis:// URL, or None"),
    "NAMESPACE": (
        lambda v: isinstance(v, str) and v != "" and not set(v) & set("{}"),
        "a non-empty string without braces",
    ),
    "LEASE": (lambda v: _is_number(v) and v >= 0.1, "seconds >= 0.1"),
    "REDIS_FALLBACK": (lambda v: v in FALLBACKS, "one of " + ", ".join(map(repr, FALLBACKS))),
    "REDIS_TIMEOUT": (lambda v: _is_number(v) and v > 0, "seconds > 0"),
    "REDIS_SENTINELS": (
        lambda v: (
            v is None or (isinstance(v, list | tuple) and bool(v) and all(map(_is_address, v)))
        ),
        'None or a non-empty list of "host:port" strings',
    ),
    "DEPLOYMENT": (
        lambda v: v is None or (isinstance(v, str) and 0 < len(v) <= 200),
        "None or a non-empty string",
    ),
    "MAX_TEXT_BYTES": (lambda v: _is_int(v) and v >= 1024, "bytes, an integer >= 1024"),
    "CHILD_ENV": (
        lambda v: isinstance(v, list | tuple) and all(isinstance(n, str) and n for n in v),
        "a list of environment variable names",
    ),
    "IPV6_PREFIX": (lambda v: _is_int(v) and 1 <= v <= 128, "an integer from 1 to 128"),
    "SANDBOX": (lambda v: isinstance(v, bool), "True or False"),
    "SANDBOX_REQUIRE": (lambda v: v in LEVELS, "one of " + ", ".join(map(repr, LEVELS))),
    "TEMP_DIR": (
        lambda v: v is None or (isinstance(v, str) and os.path.isdir(v)),
        "None or an existing directory",
    ),
}


_DOTTED = {"CALLER": "the request", "REFUSAL_VIEW": "the request and the exception"}


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
            "Known keys: " + ", ".join(DEFAULTS) + ".",
        )
        for key in raw
        if key not in DEFAULTS
    ]
    for key, (valid, expected) in _RULES.items():
        if key in raw and not valid(raw[key]):
            found.append(
                Problem(
                    "django_pdfpool.E003", f"PDFPOOL[{key!r}] must be {expected}, not {raw[key]!r}."
                )
            )
    for key, takes in _DOTTED.items():
        path = raw.get(key)
        if not isinstance(path, str):
            continue
        try:
            import_string(path)
        except ImportError as exc:
            found.append(
                Problem(
                    "django_pdfpool.E004",
                    f"PDFPOOL[{key!r}] = {path!r} cannot be imported: {exc}",
                    f"Give the dotted path of a function taking {takes}.",
                )
            )
    if raw.get("ENGINE") == "pypdfium2" and not _importable("pypdfium2"):
        found.append(
            Problem(
                "django_pdfpool.E005",
                "PDFPOOL['ENGINE'] is 'pypdfium2' but pypdfium2 is not installed.",
                "pip install 'django-pdfpool[pdfium]'",
            )
        )
    if raw.get("BACKEND") == "redis":
        found.extend(_redis_problems(raw.get("REDIS_URL")))
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


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@functools.cache
def get_settings() -> PoolSettings:
    """The validated settings; raises ImproperlyConfigured naming every problem."""
    raw = raw_setting()
    found = problems(raw)
    if found:
        raise ImproperlyConfigured(" ".join(f"[{p.id}] {p.msg}" for p in found))
    merged = {**DEFAULTS, **raw}
    caller, refusal_view = merged["CALLER"], merged["REFUSAL_VIEW"]
    return PoolSettings(
        slots=merged["SLOTS"],
        queue=merged["QUEUE"],
        wait=None if merged["WAIT"] is None else float(merged["WAIT"]),
        timeout=float(merged["TIMEOUT"]),
        memory_limit=merged["MEMORY_LIMIT"],
        max_upload_size=merged["MAX_UPLOAD_SIZE"],
        max_pages=merged["MAX_PAGES"],
        engine=merged["ENGINE"],
        warm_children=merged["WARM_CHILDREN"],
        caller=import_string(caller) if isinstance(caller, str) else caller,
        refusal_view=(
            import_string(refusal_view) if isinstance(refusal_view, str) else refusal_view
        ),
        door=merged["DOOR"],
        door_budget=merged["DOOR_BUDGET"],
        door_budget_bytes=merged["DOOR_BUDGET_BYTES"],
        door_digests=merged["DOOR_DIGESTS"],
        body_timeout=float(merged["BODY_TIMEOUT"]),
        body_min_rate=merged["BODY_MIN_RATE"],
        body_timeout_max=float(merged["BODY_TIMEOUT_MAX"]),
        temp_dir=merged["TEMP_DIR"],
        max_text_bytes=merged["MAX_TEXT_BYTES"],
        child_env=tuple(merged["CHILD_ENV"]),
        ipv6_prefix=merged["IPV6_PREFIX"],
        sandbox=merged["SANDBOX"],
        sandbox_require=merged["SANDBOX_REQUIRE"],
        backend=merged["BACKEND"],
        redis_url=merged["REDIS_URL"],
        namespace=merged["NAMESPACE"],
        lease=float(merged["LEASE"]),
        redis_fallback=merged["REDIS_FALLBACK"],
        redis_timeout=float(merged["REDIS_TIMEOUT"]),
        redis_sentinels=tuple(
            (host.strip("[]"), int(port))
            for host, _, port in (
                address.rpartition(":") for address in merged["REDIS_SENTINELS"] or ()
            )
        ),
        deployment=merged["DEPLOYMENT"],
    )


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "PDFPOOL":
        get_settings.cache_clear()
