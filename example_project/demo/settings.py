"""Settings of the django-pdfpool example project: SQLite, no other service.

Everything a person may want to change comes from the environment:

- ``PDFPOOL_SLOTS``, ``PDFPOOL_QUEUE``, ``PDFPOOL_WAIT``, ``PDFPOOL_TIMEOUT`` (and
  ``PDFPOOL_MEMORY_LIMIT``, ``PDFPOOL_MAX_UPLOAD_SIZE``, ``PDFPOOL_MAX_PAGES``,
  ``PDFPOOL_ENGINE``, and for ``make demo-cluster`` ``PDFPOOL_REDIS_URL``,
  ``PDFPOOL_REDIS_NAMESPACE``, ``PDFPOOL_REDIS_LEASE``, ``PDFPOOL_REDIS_FALLBACK``;
  ``PDFPOOL_DOOR``, ``PDFPOOL_DOOR_DIGESTS``, ``PDFPOOL_DOOR_BUDGET``,
  ``PDFPOOL_DOOR_BODY_TIMEOUT``, ``PDFPOOL_DOOR_BODY_MIN_RATE``) become the PDFPOOL setting
  (``PDFPOOL_DOOR_BUDGET`` is ``PDFPOOL["DOOR"]["BUDGET"]``). ``PDFPOOL_TEMP_DIR`` is
  Django's ``FILE_UPLOAD_TEMP_DIR``; ``PDFPOOL_WARM_CHILDREN`` and ``PDFPOOL_CHILD_NICE``
  (benchmarks/bench_load.py turns them) are ``django_pdfpool.sandbox.configure()``'s.
  They are parsed here but validated by django-pdfpool's system checks, so
  ``PDFPOOL_SLOTS=0 make demo`` stops at ``migrate`` naming the problem.
- ``DEMO_STATE_DIR`` (default: this project's folder) holds what the demo creates
  on first use: ``db.sqlite3``, ``.secret_key`` and ``.admin_password``.
- ``DJANGO_SECRET_KEY`` (default: generated once into ``.secret_key``),
  ``DJANGO_DEBUG`` (default off), ``DJANGO_ALLOWED_HOSTS`` (comma-separated,
  added to the loopback names), ``DEMO_LOG_LEVEL`` (the pool's log level, INFO).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from django.core.management.utils import get_random_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("DEMO_STATE_DIR") or BASE_DIR)
STATE_DIR.mkdir(parents=True, exist_ok=True)
ADMIN_PASSWORD_FILE = STATE_DIR / ".admin_password"  # written by `manage.py ensure_demo_admin`


def _secret_key(path: Path) -> str:
    """The key in ``path``, generated there (readable by the owner only) on first use."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    key = get_random_secret_key()
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key


def _flag(value: str) -> bool | str:
    """1/true/yes/on and 0/false/no/off; anything else stays text for the checks to name."""
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    return value


def _integer(value: str) -> int | str:
    try:
        return int(value)
    except ValueError:
        return value


def _optional_integer(value: str) -> int | str | None:
    return None if value.lower() == "none" else _integer(value)


def _seconds(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


def _optional_seconds(value: str) -> float | str | None:
    return None if value.lower() == "none" else _seconds(value)


def _bytes(value: str) -> int | str:
    """Bytes, or with a binary suffix: ``512M``, ``1G``, ``800K``."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:].upper())
    if scale is None:
        return _integer(value)
    number = _integer(value[:-1])
    return number * scale if isinstance(number, int) else value


_PDFPOOL_ENV: dict[str, Callable[[str], Any]] = {
    "SLOTS": _integer,
    "QUEUE": _integer,
    "WAIT": _optional_seconds,  # "none": wait without limit
    "TIMEOUT": _seconds,
    "MEMORY_LIMIT": _bytes,
    "MAX_UPLOAD_SIZE": _bytes,
    "MAX_PAGES": _optional_integer,
    "ENGINE": str,
    "REDIS_URL": str,  # the Redis pool: `make demo-cluster`
    "REDIS_NAMESPACE": str,
    "REDIS_LEASE": _seconds,
    "REDIS_FALLBACK": str,
    "DOOR": _flag,  # "0": no admission before the body (benchmarks/bench_load.py compares)
    "DOOR_DIGESTS": _flag,  # "0": the door reads the body rather than answer from a digest
    "DOOR_BUDGET": _integer,
    "DOOR_BODY_TIMEOUT": _seconds,
    "DOOR_BODY_MIN_RATE": _integer,
}
_NESTED = ("REDIS", "DOOR")  # PDFPOOL_REDIS_URL is PDFPOOL["REDIS"]["URL"]


def pdfpool_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The PDFPOOL setting from ``PDFPOOL_<KEY>`` variables; unset or empty ones are left out.
    A value that does not parse is passed on as it is, for the system checks to report."""
    found: dict[str, Any] = {}
    for key, parse in _PDFPOOL_ENV.items():
        value = environ.get(f"PDFPOOL_{key}", "").strip()
        if not value:
            continue
        outer, _, inner = key.partition("_")
        if outer in _NESTED and inner:
            nested = found.setdefault(outer, {})
            if isinstance(nested, dict):  # PDFPOOL_DOOR=0 turns the door off whatever else
                nested[inner] = parse(value)
        else:
            found[key] = {} if parse(value) is True else parse(value)
    return found


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _secret_key(STATE_DIR / ".secret_key")
DEBUG = _flag(os.environ.get("DJANGO_DEBUG", "")) is True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"] + [
    host.strip() for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(",") if host.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "servestatic",
    "django_pdfpool",
    "uploads",
]

# Every middleware here runs on the event loop under ASGI: Django's own from demo.middleware
# (their hooks that do no I/O without a thread hand-off), ServeStatic's (async) for the static
# files, the pool's (sync and async). Django's classes as they ship would cost 14 hand-offs
# to a thread per request (docs/performance.md, "The server under load").
MIDDLEWARE = [
    "demo.middleware.SecurityMiddleware",
    "servestatic.middleware.ServeStaticMiddleware",
    "demo.middleware.SessionMiddleware",
    "demo.middleware.CommonMiddleware",
    "demo.middleware.CsrfViewMiddleware",
    "demo.middleware.AuthenticationMiddleware",
    "demo.middleware.MessageMiddleware",
    "demo.middleware.XFrameOptionsMiddleware",
    # Views that call get_pool().run() themselves get the same refusal answers.
    "django_pdfpool.middleware.AdmissionMiddleware",
]
# `check --deploy` looks for Django's security, CSRF and clickjacking middleware by their
# dotted paths: those above are Django's classes (subclassed), which it would report missing.
SILENCED_SYSTEM_CHECKS = ["security.W001", "security.W002", "security.W003"]

ROOT_URLCONF = "demo.urls"
WSGI_APPLICATION = "demo.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": STATE_DIR / "db.sqlite3",
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# ServeStatic (an async fork of WhiteNoise) serves the admin's and the upload page's files
# straight from the apps (no collectstatic, no CDN), also with DEBUG off under uvicorn.
STATIC_URL = "static/"
SERVESTATIC_USE_FINDERS = True

PDFPOOL = pdfpool_from_env(os.environ)
FILE_UPLOAD_TEMP_DIR = os.environ.get("PDFPOOL_TEMP_DIR") or None  # uploads staged here
if os.environ.get("PDFPOOL_WARM_CHILDREN") or os.environ.get("PDFPOOL_CHILD_NICE"):
    from django_pdfpool.sandbox import configure  # the sandbox's knobs: arguments

    warm, nice = os.environ.get("PDFPOOL_WARM_CHILDREN"), os.environ.get("PDFPOOL_CHILD_NICE")
    configure(warm=None if not warm else _flag(warm) is True, nice=int(nice) if nice else None)


def _not_a_refusal(record: Any) -> bool:
    """503s are the pool's refusals, expected under load: the access log shows them."""
    return getattr(record, "status_code", None) != 503


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,  # uvicorn's loggers are configured before ours
    "filters": {
        "not_a_refusal": {"()": "django.utils.log.CallbackFilter", "callback": _not_a_refusal},
    },
    "formatters": {"plain": {"format": "%(levelname)s:     %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "errors": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["not_a_refusal"],
        },
    },
    "loggers": {
        # The pool: refused PDFs (INFO), failed jobs (ERROR), a drain that timed out (WARNING).
        "django_pdfpool": {
            "handlers": ["console"],
            "level": os.environ.get("DEMO_LOG_LEVEL", "INFO").upper(),
            "propagate": False,
        },
        # Server errors with their tracebacks (with DEBUG off, Django would mail them).
        "django.request": {"handlers": ["errors"], "level": "ERROR", "propagate": False},
    },
}
