"""The door: the pool's (and Django's, and the framework's) answer to an upload from its
headers, before its body is read (docs/door.md); ``decide`` the rule, ``through_door`` its steps."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import enum
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Literal, TypeVar, cast

from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import (
    REASON_BAD_ORIGIN,
    REASON_NO_CSRF_COOKIE,
    CsrfViewMiddleware,
    InvalidTokenFormat,
    RejectRequest,
)
from django.middleware.locale import LocaleMiddleware
from django.utils.module_loading import import_string

from .admission import jobs
from .admission.ledger import Pressure
from .callers import ASKING, acaller_of, address_caller, caller_of, network_of
from .conf import DoorSettings, get_settings
from .configured import get_pool
from .exceptions import (
    CallerBusy,
    NoUpload,
    PoolBusy,
    PoolClosed,
    UploadRejected,
    UploadTooLarge,
    Wording,
)
from .record import AdmissionRecord, PooledView, UploadHeaders, without_body

logger = logging.getLogger("django_pdfpool.door")

Refusal = PoolClosed | PoolBusy | CallerBusy | UploadRejected
Kind = Literal["place", "budget"]
Value = TypeVar("Value")  # what a step's call gives
Sizes = tuple[int, int | None]  # the sizes a body's PDF may have, low to high (None: any)


@dataclass(frozen=True)
class Terms:
    """The settings the door decides by."""

    max_upload_size: int
    budget: int  # bodies that may join, let in past the places
    budget_bytes: int  # their bytes together, charged as they arrive
    body_timeout: float  # seconds a body has, before its rate extends it
    body_min_rate: int  # bytes a second that earn another second
    body_timeout_max: float = 300.0  # seconds a body has in all, however fast it comes
    caller_entries: int = 1  # budget entries a caller may hold: 1 + SLOTS + QUEUE, one per job


def terms() -> Terms:
    """The door's terms from the settings (its defaults while it is off, for the status page),
    built once per settings object."""
    global _terms_of
    conf = get_settings()
    if _terms_of[0] is not conf:
        door = conf.door or DoorSettings.defaults()
        timing = (door.body_timeout, door.body_min_rate, door.body_timeout_max)
        entries = 1 + conf.slots + conf.queue  # one, and one per job that can be in flight
        built = Terms(conf.max_upload_size, door.budget, door.budget_bytes, *timing, entries)
        _terms_of = (conf, built)
    return _terms_of[1]


@dataclass(frozen=True)
class HeldInfo:
    """One body on its way in, for the status page and the metrics."""

    caller: str
    kind: Kind
    received: int  # bytes so far
    age: float  # seconds since it was let in
    left: float  # seconds until its deadline


class Ticket:
    """One arriving body's place or budget entry; ``release()`` (idempotent) when its
    call reaches the pool, its request ends, or its deadline passes."""

    __slots__ = (
        "_watchers", "arrivals", "key", "kind", "limit", "received", "reserved", "sizes",
        "started", "terms", "who",
    )  # fmt: skip

    def __init__(
        self, arrivals: Arrivals, who: str, kind: Kind, key: str | None, reserved: int, sizes: Sizes
    ) -> None:
        self.arrivals = arrivals  # whose lock guards it while it is held
        self._watchers: list[Callable[[], object]] = []  # called at release
        self.who, self.kind, self.key, self.reserved = who, kind, key, reserved
        self.sizes = sizes  # of the PDF it carries: what the job it may start will be
        self.received = 0  # body bytes so far
        self.started = time.monotonic()
        self.limit, self.terms = reserved, TERMS  # its body's limit and terms: ``decide``'s

    def deadline(self, terms: Terms) -> float:
        """When the body must be in (monotonic): mod_reqtimeout's ``body=T-M,MinRate=R``,
        so that a trickle just above the rate holds its place ``M`` seconds at most."""
        earned = terms.body_timeout + self.received / terms.body_min_rate
        return self.started + min(earned, terms.body_timeout_max)

    def arrived(self, size: int, terms: Terms) -> bool:
        """Count ``size`` more bytes, a budget entry's past its reserve charged to the budget;
        False (not counted, the body shed) if that takes it past ``budget_bytes``."""
        arrivals = self.arrivals
        with arrivals._lock:
            before = max(self.reserved, self.received)
            self.received += size
            if self.kind == "place" or self not in arrivals._tickets:
                return True
            more = max(self.reserved, self.received) - before
            if more and arrivals._charged + more > terms.budget_bytes:
                self.received -= size
                arrivals.shed += 1
                return False
            arrivals._charged += more
            return True

    @property
    def released(self) -> bool:
        return self not in self.arrivals._tickets

    def release(self, timed_out: bool = False) -> None:
        """Give it back, once (a time-out counted once), and wake who waits for that."""
        arrivals = self.arrivals
        with arrivals._lock:
            if self not in arrivals._tickets:
                return
            arrivals._tickets.discard(self)
            arrivals.timed_out += timed_out
            if self.kind == "budget":
                arrivals._charged -= max(self.reserved, self.received)
            watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            with contextlib.suppress(RuntimeError):  # a waiter's loop that has closed
                watcher()

    def wait_released(self, timeout: float) -> bool:  # on a sync request's thread
        gone = threading.Event()
        with self._watching(gone.set):
            gone.wait(max(0.0, timeout))
        return self.released

    async def areleased(self, timeout: float) -> bool:
        """Await the release up to ``timeout`` s, woken by whichever thread releases it."""
        gone = asyncio.Event()
        wake = partial(asyncio.get_running_loop().call_soon_threadsafe, gone.set)
        with self._watching(wake), contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gone.wait(), max(0.0, timeout))
        return self.released

    @contextlib.contextmanager
    def _watching(self, watcher: Callable[[], object]) -> Iterator[None]:
        """``watcher`` called at the release (at once if it is released already) while in
        the block; a cancel too leaves it unwatched."""
        with self.arrivals._lock:
            held = self in self.arrivals._tickets
            if held:
                self._watchers.append(watcher)
        if not held:
            watcher()
        try:
            yield
        finally:
            with self.arrivals._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)


class Arrivals:
    """This process's bodies let in and still arriving, each on a place or a budget entry
    (one that may join), with what was shed and what timed out. Thread-safe."""

    __slots__ = ("_charged", "_lock", "_tickets", "shed", "timed_out")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards every field, and each held ticket's own
        self._tickets: set[Ticket] = set()
        self._charged = 0  # budget bytes held: each entry's reserve, or what it has sent
        self.shed = 0  # refused past the budget (they might have joined)
        self.timed_out = 0  # let in, then past their deadline

    @property
    def count(self) -> int:
        return len(self._tickets)

    def carries(self, key: str | None) -> bool:
        """Whether a body arriving now declared ``key``: its job will be there to join."""
        with self._lock:
            return key is not None and any(t.key == key for t in self._tickets)

    def may_start(self, sizes: Sizes, keyed: bool = False) -> bool:
        """Whether a body on a place may start a job of one of ``sizes`` (an upload that
        declares a key can only be the job of a body that declared none, or its own)."""
        low, high = sizes
        with self._lock:
            return any(
                t.kind == "place" and not (keyed and t.key)
                and (high is None or t.sizes[0] <= high)
                and (t.sizes[1] is None or low <= t.sizes[1])
                for t in self._tickets
            )  # fmt: skip

    def own(self, who: str, key: str | None = None) -> Ticket | None:
        """The body ``who`` has arriving for ``key``, else any it has (a next upload that
        could only be shed waits for it)."""
        with self._lock:
            mine = [t for t in self._tickets if t.who == who]
        return next((t for t in mine if t.key == key), mine[0] if mine else None)

    def holds_place(self, who: str) -> bool:
        with self._lock:
            return any(t.kind == "place" and t.who == who for t in self._tickets)

    def place(
        self, free: int, who: str, key: str | None, sizes: Sizes = (0, None)
    ) -> Ticket | None:
        """A place if fewer than ``free`` are taken by arriving bodies and ``who`` holds
        none (one job per caller: a second body of theirs can only join)."""
        return self._take(Ticket(self, who, "place", key, 0, sizes), free)

    def budget(
        self, who: str, key: str | None, size: int, terms: Terms, sizes: Sizes = (0, None),
        in_flight: bool = False,
    ) -> Ticket | None:  # fmt: skip
        """A budget entry reserving its share of ``budget_bytes`` at most; ``who`` may hold one,
        or ``caller_entries`` (one per job it may join) if ``key``'s job is ``in_flight``."""
        reserve = min(size, terms.budget_bytes // max(terms.budget, 1))
        entry = Ticket(self, who, "budget", key, reserve, sizes)
        mine = terms.caller_entries if in_flight else 1
        return self._take(entry, terms.budget, terms.budget_bytes, mine)

    def _take(
        self, ticket: Ticket, most: int, most_bytes: int = 0, mine_most: int = 1
    ) -> Ticket | None:
        """``ticket`` held, unless ``most`` of its kind are, its caller holds ``mine_most`` or
        one for its key, or its reserve would take the budget past ``most_bytes``."""
        with self._lock:
            same = [t for t in self._tickets if t.kind == ticket.kind]
            mine = [t for t in same if t.who == ticket.who]
            if len(same) >= most or len(mine) >= mine_most:
                return None
            over = ticket.kind == "budget" and self._charged + ticket.reserved > most_bytes
            if over or any(t.key == ticket.key for t in mine):
                return None
            self._charged += ticket.reserved
            self._tickets.add(ticket)
            return ticket

    def count_shed(self) -> None:
        with self._lock:
            self.shed += 1

    def expire(self, terms: Terms, now: float | None = None) -> list[Ticket]:
        """Release every ticket past its deadline (so that a silent client holds nothing);
        the adapters answer those requests 408 when they next look."""
        now = time.monotonic() if now is None else now
        with self._lock:
            overdue = [t for t in self._tickets if t.deadline(terms) <= now]
        for ticket in overdue:
            ticket.release(timed_out=True)
        return overdue

    def held(self, terms: Terms) -> list[HeldInfo]:
        """The bodies arriving now, oldest first, those past their deadline released first
        (every reader agrees: status page, metrics)."""
        self.expire(terms)
        now = time.monotonic()
        with self._lock:
            tickets = sorted(self._tickets, key=lambda t: t.started)
        return [
            HeldInfo(t.who, t.kind, t.received, now - t.started, t.deadline(terms) - now)
            for t in tickets
        ]


TERMS = Terms(0, 0, 0, 20.0, 500)  # a ticket's until ``decide`` gives it the settings'
_terms_of: tuple[object, Terms] = (None, TERMS)  # ``terms()``'s last, and the settings it read
ARRIVING = Arrivals()
"""This process's bodies on their way in, for both adapters."""


def decide(
    upload: UploadHeaders,
    key: str | None,
    pressure: Pressure,
    arrivals: Arrivals,
    *,
    who: str,
    known: bool,
    terms: Terms,
    field: str = "file",
    framework: bool = False,
) -> tuple[Refusal | Ticket | None, bool]:
    """The pool's answer, or a ticket for the body (None: a form that cannot hold the file never
    reaches the pool, Django answers); and whether a refusal is the budget's shed.
    ``key``: the upload's, if trusted; ``who``: the caller, or its network if not ``known``;
    ``field``: the form's file field; ``framework``: the body is a framework's parsers' to read."""
    done, early = headers_answer(upload, terms, field, framework)
    if done:
        return early, False
    if pressure.closed:
        return jobs.closing(), False
    if pressure.refusing is not None:
        return pressure.refusing, False
    limit, sizes = upload.body_limit(terms.max_upload_size), upload.file_sizes(field)
    size = limit if upload.declared_size is None else upload.declared_size
    arrivals.expire(terms)
    busy = known and pressure.caller_busy

    def refused(shed: bool) -> tuple[Refusal, bool]:  # the pool's rule 2 (busy), else rule 3
        if busy:
            return jobs.caller_busy(pressure.caller_retry_after), shed
        return jobs.queue_full(pressure.retry_after), shed

    def let_in(ticket: Ticket) -> tuple[Ticket, bool]:
        ticket.limit, ticket.terms = limit, terms  # what its body is read against
        return ticket, False

    def may_join(in_flight: bool = False) -> tuple[Refusal | Ticket, bool]:
        entry = arrivals.budget(who, key, size, terms, sizes, in_flight)
        return refused(True) if entry is None else let_in(entry)

    if key is not None and (pressure.in_flight or arrivals.carries(key)):
        return may_join(pressure.in_flight)  # it joins: no slot, no queue place, any caller
    if key is not None and busy:
        return refused(False)
    ticket = None if busy else arrivals.place(pressure.free, who, key, sizes)
    if ticket is not None:
        return let_in(ticket)
    if key is not None:  # a body on its way may turn out to start this key's job
        may_start = arrivals.may_start(sizes, keyed=True) or arrivals.holds_place(who)
        return may_join() if may_start else refused(False)
    low, high = sizes  # of its PDF (the pool's job sizes unknown: it may be any job's)
    if (
        (busy or not pressure.free)
        and pressure.sizes is not None
        and high is not None
        and not any(low <= job <= high for job in pressure.sizes)
        and not arrivals.may_start(sizes)
    ):
        return refused(False)  # no job in flight, nor one a body on a place may start, has it
    return may_join()  # every place taken, or the caller busy: it can only join


def headers_answer(
    upload: UploadHeaders, terms: Terms, field: str, framework: bool
) -> tuple[bool, UploadRejected | None]:
    """What the decorator answers before it asks who calls, if the headers tell: (True, its
    413 or 400), (True, None) where Django answers; (False, None) if they do not."""
    if upload.declares_too_much(terms.max_upload_size):  # as the decorator: size first
        return True, UploadTooLarge.over(terms.max_upload_size)
    if upload.holds_no_pdf(framework):  # then the file
        return True, NoUpload(Wording.NO_UPLOAD.format(field=field))
    if upload.holds_no_file(field):  # Django's (or the framework's) answer, from a few bytes
        return True, None
    return False, None


# --- the steps around the rule, run on a thread or an event loop ---------------------------


@dataclass(frozen=True, slots=True)
class Call(Generic[Value]):
    """One piece of IO a step function asks for: ``sync`` blocks this thread, ``async_``
    is awaited on the event loop; both give the same ``Value``."""

    sync: Callable[[], Value]
    async_: Callable[[], Awaitable[Value]]

    @classmethod
    def blocking(cls, read: Callable[[], Value]) -> Call[Value]:
        """``read``, which may wait (on the network, say): in a thread off the event loop."""
        return cls(read, sync_to_async(read, thread_sensitive=False))

    @classmethod
    def django(cls, code: Callable[[], Value]) -> Call[Value]:
        """``code``, which may use the database: on the thread Django runs a request's sync
        code on (``PdfPoolDoor``'s own, before Django), never a pool thread that would keep
        its connections open."""
        return cls(code, sync_to_async(code, thread_sensitive=True))


Steps = Generator[Call[Any], Any, Value]
"""A step function's generator: it yields calls, is sent their values, returns a ``Value``."""


def run_steps(steps: Steps[Value]) -> Value:
    """Run ``steps`` on this thread: each call's sync side, its value or its exception
    (raised inside the step function, where it yielded) sent back."""
    try:
        call = next(steps)
        while True:
            try:
                value = call.sync()
            except BaseException as error:
                call = steps.throw(error)
            else:
                call = steps.send(value)
    except StopIteration as done:
        return cast(Value, done.value)


async def arun_steps(steps: Steps[Value]) -> Value:
    """``run_steps`` on this event loop: each call's async side (a cancel too is raised
    inside the step function)."""
    try:
        call = next(steps)
        while True:
            try:
                value = await call.async_()
            except BaseException as error:
                call = steps.throw(error)
            else:
                call = steps.send(value)
    except StopIteration as done:
        return cast(Value, done.value)


def ask_caller(request: HttpRequest) -> Steps[str | None]:
    """The caller (``caller_of``, or ``acaller_of`` on a loop), or None when ``CALLER`` cannot
    tell before the body: one that raises (it reads ``request.user``, say) is asked in the view."""
    request.META[ASKING] = True
    try:
        caller: str = yield Call(partial(caller_of, request), partial(acaller_of, request))
        return caller
    except Exception:
        logger.debug("CALLER could not tell the door who asks", exc_info=True)
        return None
    finally:
        del request.META[ASKING]


_SERVED: dict[tuple[str, tuple[str, ...], bool], bool] = {}  # get_host()'s verdict, by its input


def _host_served(request: HttpRequest) -> bool:
    """Whether ``request.get_host()`` passes (else Django answers, 400 from CommonMiddleware
    say), remembered per raw host and settings: Django's check costs more than the door's rule."""
    raw = request._get_raw_host()  # type: ignore[attr-defined]  # what get_host() validates
    key = (raw, tuple(settings.ALLOWED_HOSTS), settings.DEBUG)
    served = _SERVED.get(key)
    if served is None:
        try:
            served = bool(request.get_host())
        except DisallowedHost:
            served = False
        if len(_SERVED) < 256:  # hosts of every spelling: the rest asked each time
            _SERVED[key] = served
    return served


_FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")  # Django reads their body


def csrf_refusal(request: HttpRequest) -> Callable[[], HttpResponse] | None:
    """Django's own 403, as sync code to run, for a POST ``CsrfViewMiddleware`` refuses from
    its headers (docs/door.md: origin, referer, cookie, a token not in a form); None if not."""
    if getattr(request, "_dont_enforce_csrf_checks", False):  # django.test.Client's
        return None
    found = _installed(CsrfViewMiddleware)
    if found is None:
        return None
    middleware = found[1]
    reason = None
    try:
        if "HTTP_ORIGIN" in request.META:  # process_view's order
            if not middleware._origin_verified(request):
                reason = REASON_BAD_ORIGIN % request.META["HTTP_ORIGIN"]
        elif request.is_secure():
            middleware._check_referer(request)
        if reason is None and not settings.CSRF_USE_SESSIONS:  # else the session's to check
            if request.content_type not in _FORMS or _parsed_empty(request):  # the header's
                middleware._check_token(request)
            elif middleware._get_secret(request) is None:  # the form's token: the body's
                reason = REASON_NO_CSRF_COOKIE
    except InvalidTokenFormat as bad:
        reason = f"CSRF cookie {bad.reason}."
    except RejectRequest as refused:
        reason = refused.reason
    if reason is None:
        return None

    def rejected() -> HttpResponse:  # rendered as Django's handler renders a TemplateResponse
        response = middleware._reject(request, reason)
        render = getattr(response, "render", None)
        return cast(HttpResponse, render() if callable(render) else response)

    return rejected


def _parsed_empty(request: HttpRequest) -> bool:
    """A form without ``Content-Length`` (chunked) Django parses none of: a multipart one, or
    under WSGI (its stream is that length) any."""
    if request.META.get("CONTENT_LENGTH"):
        return False
    return request.content_type == _FORMS[0] or getattr(request, "scope", None) is None


class Unknown(enum.Enum):
    """What keeps Django's answer before the view from the headers."""

    USER = "a user whose session or credentials are not read yet"
    ANSWER = "Django refuses, but which answer it gives needs the body (a form's CSRF token)"


def login_refusal(
    request: HttpRequest, func: Callable[..., Any]
) -> Steps[HttpResponse | Unknown | None]:
    """``LoginRequiredMiddleware``'s redirect when the user (``request.user``, read off the
    loop, or none to sign in yet) is anonymous; None if it passes, ``Unknown.USER`` if unknown."""
    if not apps.is_installed("django.contrib.auth"):  # its models import only then
        return None
    from django.contrib.auth import middleware as auth
    from django.contrib.auth.models import AnonymousUser

    found = _installed(auth.LoginRequiredMiddleware)
    if found is None or not getattr(func, "login_required", True):  # login_not_required
        return None
    user = getattr(request, "user", None)
    auser = getattr(request, "auser", None)
    if user is not None and auser is not None:  # AuthenticationMiddleware's: it reads the session
        user = yield Call(partial(getattr, request, "user"), auser)
    if user is None:
        if _unread_session(request) or _others_sign_in(request):
            return Unknown.USER
        user = AnonymousUser()
    if user.is_authenticated:
        return None
    probe = copy.copy(request)
    probe.user = user
    return cast(HttpResponse | None, found[1].process_view(probe, func, (), {}))


def _login_first() -> bool:
    """Whether ``LoginRequiredMiddleware`` comes before ``CsrfViewMiddleware`` (or alone)."""
    from django.contrib.auth.middleware import LoginRequiredMiddleware

    login, csrf = _installed(LoginRequiredMiddleware), _installed(CsrfViewMiddleware)
    return csrf is None or (login is not None and login[0] < csrf[0])


def _sign_in(request: HttpRequest) -> None:
    """Before Django's middleware (``PdfPoolDoor``), give ``request`` the session and user
    ``SessionMiddleware`` and ``AuthenticationMiddleware`` give it (read when asked), if they
    are installed and nothing else may sign its user in: the door asks as the view would, and
    its answer goes out with the session as asked (``Vary: Cookie``, a stale cookie dropped)."""
    if hasattr(request, "user") or _others_sign_in(request):
        return
    for middleware in _signers()[0]:
        middleware.process_request(request)


def _others_sign_in(request: HttpRequest) -> bool:
    """Whether a middleware may sign the user in from more than the session: a remote-user
    one, or with an ``Authorization`` header, any not Django's (Django's never read it); or
    whether auth is not installed."""
    others = _signers()[1]
    return others is None or (others and "HTTP_AUTHORIZATION" in request.META)


@functools.cache
def _signers() -> tuple[tuple[Any, ...], bool | None]:
    """The session's and the user's middleware, if both are installed (else none), and
    whether another middleware may read ``Authorization`` (None: auth is not installed, or
    a remote-user middleware signs in)."""
    if not apps.is_installed("django.contrib.auth"):  # its middleware imports its models
        return (), None
    from django.contrib.auth.middleware import AuthenticationMiddleware, RemoteUserMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware

    if _installed(RemoteUserMiddleware) is not None:
        return (), None
    ours = ("django.", f"{__package__}.")
    others = not all(path.startswith(ours) for path in settings.MIDDLEWARE)
    found = [_installed(kind) for kind in (SessionMiddleware, AuthenticationMiddleware)]
    return (() if None in found else tuple(f[1] for f in filter(None, found))), others


@functools.cache
def _installed(kind: Any) -> tuple[int, Any] | None:
    """The project's first middleware of ``kind`` (Django's, or a subclass) if installed, and
    its place in ``MIDDLEWARE``, to ask its checks, private but Django's own."""
    for at, path in enumerate(settings.MIDDLEWARE):
        found = import_string(path)
        if isinstance(found, type) and issubclass(found, kind):
            return at, found(HttpResponse)
    return None


@receiver(setting_changed)
def _forget(*, setting: str, **kwargs: Any) -> None:
    """The middleware found again, with its settings (CSRF keeps its origins per instance)."""
    if setting in ("MIDDLEWARE", "INSTALLED_APPS") or setting.startswith(("CSRF_", "SESSION_")):
        _installed.cache_clear()
        _signers.cache_clear()


def framework_refusal(
    request: HttpRequest, view: PooledView, throttle: bool = False
) -> HttpResponse | str | None:
    """The framework's 401 or 403 from the headers (``view.authenticate``), with ``throttle``
    its 429 too, asked of a copy with an empty body; if it passes, the caller it names (None
    if it names none); None if a session not read yet may pass, or if it read the body (its
    answer is the one it gives with the body)."""
    if view.authenticate is None or _unread_session(request):
        return None
    probe = without_body(request)
    try:
        answer = view.authenticate(probe, throttle)
    except Exception:  # it needs more than the headers: the framework answers later
        logger.debug("the framework could not authenticate from the headers", exc_info=True)
        return None
    return None if probe._read_started else answer  # type: ignore[attr-defined]


def _unread_session(request: HttpRequest) -> bool:
    return not hasattr(request, "user") and settings.SESSION_COOKIE_NAME in request.COOKIES


def before_view(
    request: HttpRequest, func: Callable[..., Any], view: PooledView
) -> Steps[HttpResponse | Unknown | str | None]:
    """What Django (CSRF's 403 and the login's redirect, in ``MIDDLEWARE``'s order) and then
    the framework (its 401 or 403) answer before ``func`` from the headers: None if they pass
    (a str: the caller the framework names), ``Unknown`` if that is not known."""
    login = yield from login_refusal(request, func)
    exempt = getattr(func, "csrf_exempt", False)
    refuse = None if exempt else csrf_refusal(request)
    if login is not None and _login_first():
        if isinstance(login, HttpResponse):
            return login
        if refuse is not None:  # Django refuses: the redirect, or for a user 403
            return Unknown.ANSWER
    if refuse is not None:
        return cast(HttpResponse, (yield Call.django(refuse)))
    if isinstance(login, HttpResponse):  # past CSRF's check: from a form, the body's
        return Unknown.ANSWER if request.content_type in _FORMS and not exempt else login
    if login is None and view.authenticate is not None:
        if _unread_session(request):
            return Unknown.USER  # the framework reads it
        login = yield Call.django(partial(framework_refusal, request, view))
    return login


def through_door(
    request: HttpRequest, record: AdmissionRecord, view: PooledView, func: Callable[..., Any]
) -> Steps[Refusal | Ticket | HttpResponse | None]:
    """``before_view``'s answer (a session it needs read as Django's middleware would), else
    ``_decided``'s, the framework's throttles before a refusal; None: Django answers (a host it
    does not serve, an answer it gives from the body), the door steps aside."""
    if not _host_served(request):
        return None
    locale = _installed(LocaleMiddleware)  # Django's answers from the door speak its language
    if locale is not None and not hasattr(request, "LANGUAGE_CODE"):
        locale[1].process_request(request)
    _sign_in(request)
    first = yield from before_view(request, func, view)
    if first is Unknown.ANSWER or isinstance(first, HttpResponse):
        return None if first is Unknown.ANSWER else first
    if isinstance(first, str):  # the framework let it pass, and said who asks
        record.caller = first
    answer, shed = yield from _decided(request, record, view)
    if answer is None or isinstance(answer, Ticket):
        return answer
    if view.authenticate is not None:  # its throttles come before its view (and count it once)
        throttled = yield Call.django(partial(framework_refusal, request, view, throttle=True))
        if isinstance(throttled, HttpResponse):
            return throttled
    if shed:
        ARRIVING.count_shed()
    elif isinstance(answer, PoolBusy | PoolClosed | CallerBusy):
        get_pool().count_refusal(answer, record.caller)
    return answer


def _decided(
    request: HttpRequest, record: AdmissionRecord, view: PooledView
) -> Steps[tuple[Refusal | Ticket | None, bool]]:
    """``decide`` on the pool's pressure (the caller asked first): a ticket (its place given
    back through ``record.release``), or a refusal and whether it is the budget's shed (None:
    Django answers)."""
    upload = record.headers
    if isinstance(upload, UploadRejected):
        return upload, False
    door_terms = terms()
    done, early = headers_answer(upload, door_terms, view.field, view.parsers)
    if done:  # the caller not asked: the decorator answers these before it asks
        return early, False
    framework = view.own_caller is not None or view.authenticate is not None
    if not framework:  # else the framework names it (``before_view``), or its view will
        record.caller = yield from ask_caller(request)
    known = record.caller is not None
    who = network_of(record.caller or address_caller(request.META.get("REMOTE_ADDR") or "unknown"))
    door, pool = get_settings().door, get_pool()
    sized = upload.declared_size is not None  # else a 413 or 400 from the body may come first
    key = record.key if door is not None and door.digests and sized else None  # from a digest
    read = partial(pool.pressure, key, record.caller)
    give_up = time.monotonic() + door_terms.body_timeout
    while True:
        pressure = (yield Call.blocking(read)) if pool.blocking_reads else read()  # memory only
        decided, shed = decide(
            upload, key, pressure, ARRIVING, who=who, known=known, terms=door_terms,
            field=view.field, framework=view.parsers,
        )  # fmt: skip
        if isinstance(decided, Ticket):
            record.release = decided.release
            return decided, False
        own = ARRIVING.own(who, key) if shed else None
        if own is not None:  # its caller's body is arriving: wait for it, decide again
            left = give_up - time.monotonic()
            if (yield Call(partial(own.wait_released, left), partial(own.areleased, left))):
                continue
        return decided, shed


def door_status() -> dict[str, Any]:
    """This process's door, JSON-ready: the bodies arriving, what was shed and what timed
    out, and its terms."""
    door_terms = dataclasses.asdict(terms())
    del door_terms["max_upload_size"], door_terms["caller_entries"]  # the pool's settings
    return {
        "held": [dataclasses.asdict(held) for held in ARRIVING.held(terms())],
        "shed": ARRIVING.shed,
        "timed_out": ARRIVING.timed_out,
        **door_terms,
    }
