"""The door on DRF and django-ninja routes against the door off: the same upload through
``PdfPoolDoor``, the same answer (status, refusal code, the headers that matter), over every
route kind, credentials, bodies, digests, ``Accept`` headers, with the pool idle or full."""

from __future__ import annotations

import asyncio
import itertools
import json
import random

import pytest
from django.core.cache import cache
from django.test import Client

from django_pdfpool import get_pool
from django_pdfpool.record import format_digest
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD
from tests.support.door import FORM_TYPE, MINE, THEIRS, answer_of, asgi_post, form, sha

pytestmark = pytest.mark.urls("tests.project.contrib_urls")

ROUTES = {  # each route, and the credentials that mean something to it
    "drf-apiview": ("/drf/apiview/held/", ("none", "token", "bearer")),  # multipart and raw
    "drf-function": ("/drf/function/held/", ("none", "token", "session-stale")),  # @api_view
    "drf-viewset": ("/drf/documents/", ("none", "token")),  # a ViewSet's create
    "drf-action": ("/drf/documents/above/", ("none", "token")),  # a ViewSet's @action
    "drf-throttled": ("/drf/function/throttled/", ("none", "token")),  # one a day, raw only
    "drf-admins": ("/drf/function/admins/", ("none", "token", "token-admin")),  # DRF's parsers
    # its signed-in user without X-CSRFToken is left out: DRF's CSRF check parses the body
    # (docs/door.md: a framework's check that reads the body, the door's refusal first)
    "drf-session": ("/drf/apiview/session/", ("session-csrf", "session-stale", "token")),
    "drf-versioned": ("/drf/apiview/versioned/", ("none", "token")),  # Accept's version 1 only
    "ninja-async": ("/ninja/held", ("none", "bearer", "bearer-bad", "bearer-banned", "token")),
    "ninja-sync-raw": ("/ninja/held-raw", ("none", "bearer", "bearer-bad")),  # the raw body
    "ninja-router": ("/ninja/router/held", ("none", "api-key", "api-key-bad", "bearer")),
    "ninja-api": ("/ninja-guarded/held", ("none", "bearer", "bearer-bad")),  # the API's auth
    "ninja-session": ("/ninja/session", ("session", "session-csrf", "session-stale", "none")),
    "ninja-throttled": ("/ninja/throttled", ("none", "bearer")),  # anyone, one a day
}
TOKEN = "A" * 32
CREDENTIALS = {
    "none": [],
    "token": [(b"authorization", b"Token alice")],
    "token-admin": [(b"authorization", b"Token admin")],
    "bearer": [(b"authorization", b"Bearer t-alice")],
    "bearer-bad": [(b"authorization", b"Bearer nope")],
    "bearer-banned": [(b"authorization", b"Bearer t-banned")],
    "session-stale": [(b"cookie", f"csrftoken={TOKEN}; sessionid={'s' * 32}".encode())],
    "session": [],  # a signed-in user's session, csrftoken, no X-CSRFToken (made in the test)
    "session-csrf": [(b"x-csrftoken", TOKEN.encode())],  # the same, with the header's token
    "api-key": [(b"x-api-key", b"k-1")],
    "api-key-bad": [(b"x-api-key", b"nope")],
}


BODIES = {
    "raw": (MINE, "application/pdf"),
    "raw-empty": (b"", "application/pdf"),
    "raw-over": (b"%PDF-" + b"z" * 5000, "application/pdf"),
    "form": (form(MINE), FORM_TYPE),
    "form-other-field": (form(MINE, "other"), FORM_TYPE),
    "form-over": (form(b"%PDF-" + b"z" * 5000), FORM_TYPE),
    # left out: a form declared over the limit without the field, ninja's 422 once all of it
    # is read, the door's 413 from its Content-Length (docs/door.md)
    "json": (b'{"file": "x"}', "application/json"),
    "empty": (b"", None),
    "text": (b"hello", "text/plain"),
}
DIGESTS = {
    "none": [],
    "mine": [(b"repr-digest", format_digest(sha(MINE)).encode())],
    "theirs": [(b"repr-digest", format_digest(sha(THEIRS)).encode())],
    "form-mine": [(b"pdf-digest", format_digest(sha(MINE)).encode())],
    "unreadable": [(b"repr-digest", b"sha-256=:!!:")],
}
ACCEPTS = {
    "none": [],
    "json": [(b"accept", b"application/json")],
    "html": [(b"accept", b"text/html")],
    "xml": [(b"accept", b"application/xml")],
    "version-2": [(b"accept", b"application/json; version=2")],
}
SESSION, CSRF = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
)


def _body_decides(route: str, credential: str, kind: str, digest: str) -> bool:
    """What only the body tells, where the door answers from the headers (docs/door.md): a form
    that declares its file's digest, its file missing or over the limit, or without the CSRF
    token its session cookie asks for (a full pool's 503); on DRF's session route, a signed-in
    user's CSRF check, which parses the body (its parsers' 413 before the headers' 400)."""
    if route == "drf-session" and credential == "session-csrf" and digest == "unreadable":
        return True
    return digest == "form-mine" and (kind != "form" or credential in ("session", "session-stale"))


GRID = [
    (route, credential, kind, *rest)
    for route, (_, credentials) in ROUTES.items()
    for credential in credentials
    for kind in BODIES
    for rest in itertools.product(DIGESTS, ACCEPTS, ("plain", "csrf"), ("length", "chunked"))
    if not _body_decides(route, credential, kind, rest[0])
]
random.Random(11).shuffle(GRID)
FOUND = [  # cases that once differed
    ("drf-throttled", "token", "raw-empty", "mine", "json", "plain", "length"),
    ("drf-throttled", "none", "raw-over", "form-mine", "none", "csrf", "chunked"),
    ("ninja-throttled", "bearer", "raw-over", "form-mine", "html", "csrf", "chunked"),
    ("ninja-api", "bearer", "raw-over", "theirs", "version-2", "csrf", "chunked"),
    ("ninja-router", "api-key", "raw-over", "mine", "version-2", "csrf", "chunked"),
    ("ninja-sync-raw", "bearer", "json", "form-mine", "json", "plain", "length"),
    ("drf-viewset", "token", "raw-empty", "unreadable", "html", "csrf", "length"),
    ("drf-action", "token", "raw", "mine", "html", "plain", "length"),
    ("drf-session", "token", "raw-over", "none", "html", "csrf", "length"),
]


def _signed_in() -> bytes:
    """A session cookie of a user in the database, and the CSRF cookie."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user = User.objects.create(username="sam")
    session = SessionStore()
    session[SESSION_KEY], session[HASH_SESSION_KEY] = str(user.pk), user.get_session_auth_hash()
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session.create()
    return f"csrftoken={TOKEN}; sessionid={session.session_key}".encode()


def _sent(case: tuple[str, ...], body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of ``case``'s upload of ``body``."""
    _, credential, kind, digest, accept, _, length = case
    content_type = BODIES[kind][1]
    sent = [(b"content-type", content_type.encode())] if content_type else []
    sent += CREDENTIALS[credential] + DIGESTS[digest] + ACCEPTS[accept]
    if credential in ("session", "session-csrf"):
        sent.append((b"cookie", _signed_in()))
    if length == "length":
        return [*sent, (b"content-length", b"%d" % len(body))]
    return [*sent, (b"transfer-encoding", b"chunked")]


def _answers(pdfpool, settings, stack, full, ask) -> list[tuple]:
    """``ask()``'s answer (status, page, headers) with the door off, then on, under ``stack``,
    the pool idle or full (its one slot held for another upload); as compared: the status,
    the refusal's code, ``Location``, whether ``Retry-After`` is there, ``WWW-Authenticate``."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "rest_framework"]  # its HTML pages
    plain = list(settings.MIDDLEWARE)
    answers = []
    for door in (False, True):
        pdfpool(MAX_UPLOAD_SIZE=4096, DOOR=door, SLOTS=1, QUEUE=0)
        settings.MIDDLEWARE = plain
        cache.clear()  # the throttles' counts
        HELD.reset()
        with held_requests(1) as threads:
            if full:
                theirs = asgi_post("/held/async/", THEIRS)
                app = PdfPoolDoor(get_asgi_application())
                threads.submit(asyncio.run, answer_of(app, theirs, THEIRS))
                wait_until(lambda: get_pool().running() == 1)
            else:
                HELD.release.set()
            settings.MIDDLEWARE = plain if stack == "plain" else [SESSION, CSRF, *plain[1:]]
            status, page, headers = ask()
        try:
            code = json.loads(page).get("code")
        except (ValueError, AttributeError):
            code = None
        said = {name.lower(): value for name, value in headers.items()}
        answers.append(
            (
                status,
                code,
                said.get("location"),
                "retry-after" in said,
                said.get("www-authenticate"),
            )
        )
        wait_until(lambda: get_pool().running() == 0)
    return answers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("full", [False, True], ids=["idle", "full"])
@pytest.mark.parametrize(
    "case", FOUND + [case for case in GRID[:80] if case not in FOUND], ids="-".join
)
def test_the_door_answers_drf_and_ninja_routes_as_with_the_door_off(pdfpool, settings, case, full):
    """Through ``PdfPoolDoor``, for each route kind of DRF and django-ninja, credentials of
    each kind, bodies, digests and ``Accept`` headers, sized or chunked, with the pool idle or
    full: the door's answer is its absence's."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    body = BODIES[case[2]][0]
    request = {**asgi_post(ROUTES[case[0]][0], body), "client": ("10.1.2.3", 5000)}
    request["headers"] = [(b"host", b"testserver"), *_sent(case, body)]

    def ask():
        status, page, headers = asyncio.run(
            answer_of(PdfPoolDoor(get_asgi_application()), request, body)
        )
        return status, page, {n.decode(): v.decode() for n, v in headers.items()}

    answers = _answers(pdfpool, settings, case[5], full, ask)
    assert answers[1] == answers[0]


WSGI_FOUND = [("drf-session", "token", "empty", "mine", "html", "plain", "length")]  # DRF pages
SIZED = [case for case in GRID if case[-1] == "length"]  # WSGI reads no body without one


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("full", [False, True], ids=["idle", "full"])
@pytest.mark.parametrize(
    "case", WSGI_FOUND + [case for case in SIZED[:20] if case not in WSGI_FOUND], ids="-".join
)
def test_the_door_answers_drf_and_ninja_routes_as_with_the_door_off_under_wsgi(
    pdfpool, settings, case, full
):
    """The same under WSGI: ``AdmissionMiddleware``, last, on or off."""
    body, content_type = BODIES[case[2]]
    meta = {}
    for name, value in _sent(case, body):
        key = "HTTP_" + name.decode().upper().replace("-", "_")
        meta[key] = f"{meta[key]}; {value.decode()}" if key in meta else value.decode()
    meta.pop("HTTP_CONTENT_TYPE", None), meta.pop("HTTP_CONTENT_LENGTH", None)

    def ask():
        client = Client(REMOTE_ADDR="10.1.2.3", raise_request_exception=False)
        path = ROUTES[case[0]][0]
        response = client.generic("POST", path, body, content_type=content_type or "", **meta)
        return response.status_code, response.content, dict(response.items())

    answers = _answers(pdfpool, settings, case[5], full, ask)
    assert answers[1] == answers[0]
