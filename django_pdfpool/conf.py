"""The PDFPOOL setting: each key declared once, with its default, bound and help, as a field
of ``PoolSettings`` (DOOR, REDIS, SANDBOX: of their own dataclass). The checks, the cached
``get_settings()`` and docs/settings.md's tables (tools/settings_tables.py) follow them."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from importlib.util import find_spec
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.crypto import salted_hmac
from django.utils.module_loading import import_string

from . import bounds
from .admission.redis.urls import UNSHOWN, presentable
from .bounds import FLAG, Bound, MiB, integer, seconds
from .sandbox.confine import REQUIRE
from .sandbox.wire import ENGINE

More = Callable[[str, Any], list[CheckMessage]]  # what a value that passed its bound lacks
Built = TypeVar("Built")  # a settings dataclass


@dataclass(frozen=True)
class Setting:
    """One key: its default, its bound (E003 "must be"), its help (one line of Markdown), how
    a valid value becomes the attribute, what the bound cannot see, and a dict's dataclass."""

    default: Any
    check: Bound
    help: str
    convert: Callable[[Any], Any] = lambda value: value
    more: More | None = None
    group: type[Any] | None = None


def setting(default: Any, check: Bound, help: str, **more: Any) -> Any:
    """A field of a settings dataclass: one key, named as the field in capitals."""
    return field(metadata={"setting": Setting(default, check, help, **more)})


def table_of(cls: type[Any]) -> dict[str, Setting]:
    """The keys a settings dataclass declares with ``setting()``, in its order."""
    return {f.name.upper(): f.metadata["setting"] for f in fields(cls) if "setting" in f.metadata}


def _build(cls: type[Built], raw: dict[str, Any]) -> Built:
    """``cls`` from a valid dict over its defaults; a dict key (DOOR...) is built the same
    way (True: its defaults; False or None: off)."""
    values = {}
    for key, declared in table_of(cls).items():
        value = raw.get(key, declared.default)
        if declared.group is not None:
            on = value is not None and value is not False
            value = _build(declared.group, {} if value is True else value) if on else None
        values[key.lower()] = declared.convert(value)
    return cls(**values)


def _imported(value: Any) -> Any:
    return import_string(value) if isinstance(value, str) else value


def _addresses(value: Any) -> tuple[tuple[str, int], ...] | None:
    """Sentinels' ``["host:port", ...]`` as ``((host, port), ...)`` (``[::1]`` loses its
    brackets); None unless a list of ``host:port`` with a port number (not a URL)."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return None
    pairs = [address.rpartition(":") for address in value]
    # ASCII digits, not int("²"); five at most, not int() of 5,000 digits (a ValueError)
    digits = all(port.isascii() and port.isdigit() and len(port) <= 5 for _, _, port in pairs)
    hosts = all(host and not {"/", "@"} & set(host) for host, _, _ in pairs)
    if not digits or not hosts or not all(0 < int(port) < 65536 for _, _, port in pairs):
        return None
    return tuple((host.strip("[]"), int(port)) for host, _, port in pairs)


def _importable(takes: str, arguments: int) -> More:
    """E004 for a dotted path that cannot be imported, or names what cannot be called with
    ``arguments`` positional arguments (a callable is taken as it is)."""

    def more(name: str, path: Any) -> list[CheckMessage]:
        try:
            found = _imported(path)
        except (ImportError, TypeError, ValueError) as exc:  # ".x" is relative, "." empty
            msg = f"{name} = {path!r} cannot be imported: {exc}"
        except Exception as exc:  # its module's own error (SyntaxError, ImproperlyConfigured)
            msg = f"{name} = {path!r} cannot be imported: {type(exc).__name__}: {exc}"
        else:
            if not callable(found):
                msg = f"{name} = {path!r} is not callable ({type(found).__name__})."
            elif not _takes(found, arguments):
                msg = f"{name} = {path!r} cannot be called with {takes}."
            else:
                return []
        hint = f"Give the dotted path of a function taking {takes}."
        return [Error(msg, hint=hint, id="django_pdfpool.E004")]

    return more


def _takes(function: Callable[..., Any], arguments: int) -> bool:
    """Whether ``function``'s signature takes ``arguments`` positional ones (unknown: yes)."""
    try:
        inspect.signature(function).bind(*range(arguments))
    except ValueError:  # no signature to read (some builtins)
        return True
    except TypeError:
        return False
    return True


def _engine_installed(name: str, engine: Any) -> list[CheckMessage]:
    if engine != "pypdfium2" or find_spec("pypdfium2"):
        return []
    msg = f"{name} is 'pypdfium2' but pypdfium2 is not installed."
    return [Error(msg, hint="pip install 'django-pdfpool[pdfium]'", id="django_pdfpool.E005")]


def _redis_problems(name: str, redis: Any) -> list[CheckMessage]:
    """E006 without redis-py, E007 without a URL it parses, one it would read otherwise than
    written, or one its connections (made, never connected, as the pool makes them) refuse:
    a REDIS dict needs both."""
    if not isinstance(redis, dict):
        return []  # None: this process's own pool
    if not find_spec("redis"):
        msg = f"{name} is set but redis-py is not installed."
        return [Error(msg, hint="pip install 'django-pdfpool[redis]'", id="django_pdfpool.E006")]
    from redis.connection import parse_url

    url = redis.get("URL")
    if "URL" in redis and not isinstance(url, str):
        return []  # E003
    shown = presentable(url) if isinstance(url, str) else repr(url)  # not a URL: unshown
    try:
        parse_url(url or "")  # type: ignore[no-untyped-call]
    except ValueError as error:
        if shown == UNSHOWN or not str(url).lower().startswith(_SCHEMES):
            msg = f"{name}['URL'] must be a redis://, rediss:// or unix:// URL, not {shown}."
            hint = "For example redis://127.0.0.1:6379/0"
            return [Error(msg, hint=hint, id="django_pdfpool.E007")]
        said = f"{shown} cannot be used: {error}"  # a query option's value; no secret in it
    else:
        if misread := _misread(str(url)):
            hint = "Write redis://[USER]:PASSWORD@HOST:PORT/DB, and in the password '/', '?', '#'"
            hint += " and '@' as %2F, %3F, %23 and %40."
            return [Error(f"{name}['URL'] {misread}.", hint=hint, id="django_pdfpool.E007")]
        said = _refused(str(url), _addresses(redis.get("SENTINELS", [])) or ())
    if not said:
        return []
    hint = "ssl_* options need rediss://; with SENTINELS, redis://SERVICE/0 (docs/cluster.md)."
    return [Error(f"{name}['URL'] = {said.rstrip('.')}.", hint=hint, id="django_pdfpool.E007")]


_SCHEMES = ("redis://", "rediss://", "unix://")


def _misread(url: str) -> str:
    """What redis-py would take otherwise than written, silently: a host cut short by a
    password's '/', '?' or '#' (the rest read as path or query), a path that is no database
    number (database 0 taken instead; "/1/2" taken as 12)."""
    parts = urlsplit(url)
    if parts.scheme.lower() == "unix":
        return ""  # its path is the socket's
    if "@" in parts.path + parts.query + parts.fragment:
        return "has an '@' after its host: redis-py ends the host at a password's '/', '?' or '#'"
    if not re.fullmatch(r"/?-?[0-9]*", unquote(parts.path)):  # "-1": refused below
        return "has a path that is not a database number: redis-py would use database 0"
    return ""


def _refused(url: str, sentinels: tuple[tuple[str, int], ...]) -> str:
    """Why the pool's connections to ``url`` would be refused ("" if they would not)."""
    from .admission.redis.link import connect

    try:
        for on_loop in (False, True):  # the pool's reads, and its job loop's scripts
            connect(url, sentinels, 1.0, on_loop=on_loop)
    except ValueError as error:
        return str(error)
    except Exception as error:  # redis-py's own, on an option's value: RedisError, AttributeError
        return f"{presentable(url)} cannot be used: {error}"
    return ""


_DOTTED = Bound(lambda v: isinstance(v, str) or callable(v), "a dotted path or a callable")
_URL = Bound(lambda v: isinstance(v, str), "a redis://, rediss:// or unix:// URL")
_SENTINELS = Bound(lambda v: _addresses(v) is not None, 'a list of "host:port" strings')
_NAME = Bound(lambda v: v is None or (isinstance(v, str) and 0 < len(v) <= 200), "None or a name")
_DICT = Bound(lambda v: isinstance(v, dict), "a dict")
_DICT_OR_FLAG = Bound(lambda v: isinstance(v, dict | bool), "True, False, or a dict")
_DICT_OR_NONE = Bound(lambda v: v is None or isinstance(v, dict), "None, or a dict")
# The table below, one setting(default, bound, help, ...) a key, is kept compact as data.


@dataclass(frozen=True)
class DoorSettings:
    """PDFPOOL["DOOR"]: admission from the headers, before the body (docs/door.md)."""

    budget: int = setting(256, integer(0),
        "with every place taken, bodies the door lets in as they may join a job in flight; past "
        "it, it sheds from the headers ([the door](door.md#joins-and-the-budget)).")  # fmt: skip
    budget_bytes: int = setting(64 * MiB, integer(0, unit="bytes"),
        "the bytes of those bodies together, charged as they arrive: an entry reserves "
        "`BUDGET_BYTES / BUDGET` at most.")  # fmt: skip
    digests: bool = setting(True, FLAG,
        "the door answers from a declared digest (at once: it joins, or 503/429); `False`: it "
        "reads the body instead ([what the answer reveals](security.md#what-the-doors-answer-"
        "reveals)). Digests are verified either way.")  # fmt: skip
    body_timeout: float = setting(20.0, seconds(above=0),
        "seconds a body let in by the door has to arrive, plus one per `BODY_MIN_RATE` bytes "
        "received; past it, 408 and its place goes back ([nobody holds the door]"
        "(door.md#nobody-holds-the-door)).", convert=float)  # fmt: skip
    body_min_rate: int = setting(500, integer(1, unit="bytes a second"),
        "bytes a second that earn a body another second: Apache mod_reqtimeout's "
        "`body=20,MinRate=500`.")  # fmt: skip
    body_timeout_max: float = setting(300.0, seconds(above=0),
        "seconds a body has in all, however fast it comes: the most a trickle just above "
        "`BODY_MIN_RATE` holds a place; mod_reqtimeout's `body=20-300`.",
        convert=float)  # fmt: skip

    @classmethod
    def defaults(cls) -> DoorSettings:
        """The door's terms with no DOOR dict: what the status page shows of a door off."""
        return _build(cls, {})


@dataclass(frozen=True)
class RedisSettings:
    """PDFPOOL["REDIS"]: one pool for every process sharing URL and NAMESPACE (docs/cluster.md)."""

    url: str = setting(None, _URL,
        "`redis://`, `rediss://` or `unix://` URL; required (E007).")  # fmt: skip
    namespace: str = setting("pdfpool", bounds.NAMESPACE,
        "prefix of the pool's Redis keys: one namespace, one set of limits. Check `W001` warns "
        "of the default.")  # fmt: skip
    lease: float = setting(5.0, bounds.LEASE,
        "seconds after which a process that stopped renewing (killed, hung) loses its slots, "
        "queue places and caller holds; its sharers get 503.", convert=float)  # fmt: skip
    fallback: str = setting("refuse", bounds.FALLBACK,
        'while Redis fails: `"refuse"` new work with 503, or `"local"`: run it in this '
        "process's own pool (a warning is logged).")  # fmt: skip
    timeout: float = setting(1.0, bounds.CALL_TIMEOUT,
        "seconds a Redis call may take before Redis counts as failing.",
        convert=float)  # fmt: skip
    sentinels: tuple[tuple[str, int], ...] = setting((), _SENTINELS,
        '`["host:port", ...]`: find the primary through Redis Sentinel; `URL`\'s host is then '
        "the service name ([reaching Redis](cluster.md#reaching-redis-tls-acl-users-sentinel)).",
        convert=_addresses)  # fmt: skip
    deployment: str | None = setting(None, _NAME,
        "a name telling this deployment from others on the same Redis and `NAMESPACE` (refused, "
        "not merged); `None`: derived from `SECRET_KEY` (an HMAC, never the key).")  # fmt: skip


@dataclass(frozen=True)
class SandboxSettings:
    """PDFPOOL["SANDBOX"]: how each extraction child confines itself (docs/security.md)."""

    layers: bool = setting(True, FLAG,
        "each extraction child confines itself with every layer this host offers ([the layers]"
        "(#the-layers)); `False` turns them all off, for debugging an engine only.")  # fmt: skip
    require: str = setting("none", REQUIRE,
        "the sandbox level below which extractions are refused (503 `sandbox_unavailable`, "
        "check E021) ([the levels](#the-layers)).")  # fmt: skip
    child_env: tuple[str, ...] = setting((), bounds.CHILD_ENV,
        "names of environment variables the extraction children inherit besides the minimum "
        "([the environment](#the-childrens-environment)).", convert=tuple)  # fmt: skip

    def configure(self, **more: Any) -> None:
        """Give the extraction sandbox these terms (``sandbox.configure``)."""
        from .sandbox.extract import configure

        configure(sandbox=self.layers, require=self.require, child_env=self.child_env, **more)


@dataclass(frozen=True, kw_only=True)
class PoolSettings:
    """The validated, merged PDFPOOL setting; each field is one key (its name in capitals)."""

    slots: int = setting(2, bounds.SLOTS,
        "extractions running at once in this process. Each may use up to `MEMORY_LIMIT`: "
        "budget `SLOTS x MEMORY_LIMIT` plus the server.")  # fmt: skip
    queue: int = setting(4, bounds.QUEUE,
        "extractions waiting for a slot. With `0`, an upload arriving while every slot is "
        "taken gets 503 at once.")  # fmt: skip
    wait: float | None = setting(10.0, bounds.WAIT,
        "seconds a queued extraction may wait for a slot, then every client sharing it gets "
        "503 (`None`: wait as long as it takes).",
        convert=lambda v: None if v is None else float(v))  # fmt: skip
    timeout: float = setting(30.0, bounds.TIMEOUT,
        "seconds one extraction may run; the child and its process group are killed at the "
        "deadline and the clients get 422 `too_complex` (503 `runner_lost` if no child had "
        "read the job by then).", convert=float)  # fmt: skip
    memory_limit: int = setting(512 * MiB, integer(128 * MiB, unit="bytes"),  # pypdf alone: 45 MiB
        "bytes of address space for one child (`RLIMIT_AS`); a PDF that needs more gets 422 "
        "`too_large`. A child with pypdf imported already maps about 45 MiB.")  # fmt: skip
    max_upload_size: int = setting(50 * MiB, integer(1, unit="bytes"),
        "bytes; a larger upload gets 413 before any work, from `Content-Length` and then from "
        "the file's size ([uploads](#uploads)).")  # fmt: skip
    max_pages: int | None = setting(None, bounds.MAX_PAGES,
        "extract at most this many pages; the rest are cut off and `Extraction.truncated` is "
        "`True` (`None`: every page).")  # fmt: skip
    max_text_bytes: int = setting(8 * MiB, integer(1024, unit="bytes"),  # a useful floor
        "bytes of text (UTF-8) one extraction may return; the child cuts it there (`truncated` "
        "and `text_truncated` are `True`) ([text bombs](#text-bombs)).")  # fmt: skip
    engine: str = setting("pypdf", ENGINE,
        '`"pypdf"`, or `"pypdfium2"` with the `[pdfium]` extra (much faster; see '
        "[security](security.md) for its different failure modes).",
        more=_engine_installed)  # fmt: skip
    sandbox: SandboxSettings = setting({}, _DICT,  # noqa: RUF009
        "how each extraction child confines itself: [`SANDBOX`](#sandbox).",
        group=SandboxSettings)  # fmt: skip
    caller: Callable[..., Any] = setting("django_pdfpool.callers.user_or_ip", _DOTTED,  # noqa: RUF009
        "dotted path (or callable) from a request to a caller id for the one-job-per-caller "
        "rule ([callers](installation.md#callers)).",
        convert=_imported, more=_importable("the request", 1))  # fmt: skip
    refusal_view: Callable[..., Any] = setting(  # noqa: RUF009
        "django_pdfpool.responses.default_refusal_view", _DOTTED,
        "dotted path (or callable) of `view(request, exception) -> HttpResponse` answering in a "
        "view's place (400, 413, 422, 429, 503) for the decorator, the middleware and the door "
        "([usage](usage.md#answers-the-view-never-sees)); a decorator's `answer=` overrides it.",
        convert=_imported, more=_importable("the request and the exception", 2))  # fmt: skip
    door: DoorSettings | None = setting(True, _DICT_OR_FLAG,  # noqa: RUF009
        "decide on uploads to `@pdf_pooled` views from their headers, before their bodies "
        "are read: [`DOOR`](#door) (`False`: no door).", group=DoorSettings)  # fmt: skip
    redis: RedisSettings | None = setting(None, _DICT_OR_NONE,  # noqa: RUF009
        "one pool for every process sharing its `URL` and `NAMESPACE`: [`REDIS`](#redis) "
        "(`None`: each process has its own pool); needs the `[redis]` extra.",
        more=_redis_problems, group=RedisSettings)  # fmt: skip

    temp_dir: str | None = None  # not a key: Django's FILE_UPLOAD_TEMP_DIR (uploads staged)

    def deployment_tag(self) -> str:
        """An HMAC under SECRET_KEY (or REDIS["DEPLOYMENT"]) that tells this deployment from
        another on its Redis and namespace, which the Redis pool refuses to merge."""
        secret = self.redis.deployment if self.redis else None  # None: SECRET_KEY
        tag = salted_hmac("django_pdfpool.redis", "deployment", secret=secret, algorithm="sha256")
        return tag.hexdigest()[:32]

    @functools.cached_property
    def job_terms(self) -> dict[str, Any]:
        """``extract``'s terms for the default job: they decide what it returns, or its outcome."""
        names = ("engine", "max_pages", "max_text_bytes", "memory_limit", "timeout")
        return {name: getattr(self, name) for name in names}

    @functools.cached_property
    def results_tag(self) -> str:
        """A digest of ``job_terms`` in the default job's keys, alike in a Redis namespace."""
        values = tuple(self.job_terms.values())
        return hashlib.sha256(repr(values).encode()).hexdigest()[:12]


SETTINGS = table_of(PoolSettings)  # every PDFPOOL key and its declaration, in order
DEFAULTS: dict[str, Any] = {key: declared.default for key, declared in SETTINGS.items()}

MOVED = {  # a key that is gone -> its home, which check E008 names
    "DOOR_BUDGET": "PDFPOOL['DOOR']['BUDGET']",
    "DOOR_BUDGET_BYTES": "PDFPOOL['DOOR']['BUDGET_BYTES']",
    "DOOR_DIGESTS": "PDFPOOL['DOOR']['DIGESTS']",
    "BODY_TIMEOUT": "PDFPOOL['DOOR']['BODY_TIMEOUT']",
    "BODY_MIN_RATE": "PDFPOOL['DOOR']['BODY_MIN_RATE']",
    "BODY_TIMEOUT_MAX": "PDFPOOL['DOOR']['BODY_TIMEOUT_MAX']",
    "REDIS_URL": "PDFPOOL['REDIS']['URL']",
    "NAMESPACE": "PDFPOOL['REDIS']['NAMESPACE']",
    "LEASE": "PDFPOOL['REDIS']['LEASE']",
    "REDIS_FALLBACK": "PDFPOOL['REDIS']['FALLBACK']",
    "REDIS_TIMEOUT": "PDFPOOL['REDIS']['TIMEOUT']",
    "REDIS_SENTINELS": "PDFPOOL['REDIS']['SENTINELS']",
    "DEPLOYMENT": "PDFPOOL['REDIS']['DEPLOYMENT']",
    "SANDBOX_REQUIRE": "PDFPOOL['SANDBOX']['REQUIRE']",
    "CHILD_ENV": "PDFPOOL['SANDBOX']['CHILD_ENV']",
    "BACKEND": "PDFPOOL['REDIS'] (a dict: the Redis pool; None: each process's own)",
    "TEMP_DIR": "Django's FILE_UPLOAD_TEMP_DIR setting",
    "CHILD_NICE": "the argument django_pdfpool.sandbox.configure(nice=...)",
    "WARM_CHILDREN": "the argument django_pdfpool.sandbox.configure(warm=...)",
    "IPV6_PREFIX": "django_pdfpool.callers.address_caller(address, prefix=...) in a CALLER",
}


def raw_setting() -> Any:
    return getattr(settings, "PDFPOOL", {})


def problems(raw: Any, name: str = "PDFPOOL", table: Any = None) -> list[CheckMessage]:
    """Everything wrong with the dict ``name`` (PDFPOOL, or a nested one whose keys ``table``
    declares) as system-check errors; ``get_settings()`` raises on the same ones."""
    if not isinstance(raw, dict):
        msg = f"PDFPOOL must be a dict, not {type(raw).__name__}."
        return [Error(msg, id="django_pdfpool.E001")]
    table = SETTINGS if table is None else table
    found: list[CheckMessage] = []
    for key in [key for key in raw if key not in table]:
        if name == "PDFPOOL" and key in MOVED:
            msg = f"PDFPOOL[{key!r}] moved: use {MOVED[key]}."
            found.append(Error(msg, id="django_pdfpool.E008"))
        else:
            msg, meant = f"{name} has an unknown key {key!r}.", _meant(key, name, table)
            hint = f"Did you mean {meant}?" if meant else f"Known keys: {', '.join(table)}."
            found.append(Error(msg, hint=hint, id="django_pdfpool.E002"))
    for key in [key for key in table if key in raw]:
        declared, where, value = table[key], f"{name}[{key!r}]", raw[key]
        if not declared.check(value):
            msg = f"{where} must be {declared.check.expected}, not {_shown(value)}."
            found.append(Error(msg, id="django_pdfpool.E003"))
            continue
        if declared.group is not None and isinstance(value, dict):
            found += problems(value, where, table_of(declared.group))
        found += declared.more(where, value) if declared.more else []
    return found


def _meant(key: Any, name: str, table: dict[str, Setting]) -> str:
    """Where an unknown key was likely meant: in capitals here, or in the dict it belongs to
    (``URL`` in PDFPOOL is ``PDFPOOL['REDIS']['URL']``; ``SLOTS`` in REDIS is PDFPOOL's)."""
    key = key.upper() if isinstance(key, str) else key
    if key in table:
        return f"{name}[{key!r}]"
    if name != "PDFPOOL":
        return f"PDFPOOL[{key!r}]" if key in SETTINGS else ""
    groups = [(outer, table_of(d.group)) for outer, d in SETTINGS.items() if d.group]
    return next((f"PDFPOOL[{outer!r}][{key!r}]" for outer, keys in groups if key in keys), "")


def _shown(value: Any) -> str:
    """``repr(value)`` for a message; what may hold a URL only as ``presentable`` shows it
    (a string), or by its type: no password in checks or logs."""
    try:
        text = repr(value)
    except ValueError:  # an int past the digits str() writes
        return f"an int of {value.bit_length():,} bits"
    if "://" not in text:
        return text
    return presentable(value) if isinstance(value, str) else f"a {type(value).__name__}"


@functools.cache
def get_settings() -> PoolSettings:
    """The validated settings, cached; ImproperlyConfigured naming every problem."""
    raw = raw_setting()
    if found := problems(raw):
        raise ImproperlyConfigured(" ".join(f"[{p.id}] {p.msg}" for p in found))
    return replace(_build(PoolSettings, raw), temp_dir=settings.FILE_UPLOAD_TEMP_DIR)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("PDFPOOL", "FILE_UPLOAD_TEMP_DIR"):
        get_settings.cache_clear()
