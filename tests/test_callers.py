"""``callers``: the caller is resolved once, by ``caller_of`` (sync) and ``acaller_of``
(async), whatever the ``CALLER`` setting is (a sync function that reads the database, or an
async one), and every entry asks through them: ``@pdf_pooled`` on sync and async views,
the DRF and ninja integrations, ``django_pdfpool.caller_of`` and the door."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import ClassVar

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.http import JsonResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import path
from ninja import NinjaAPI
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

import django_pdfpool
from django_pdfpool import get_pool, pdf_pooled
from django_pdfpool.callers import (
    acaller_of,
    address_caller,
    caller_of,
    user_or_forwarded_ip,
    user_or_ip,
)
from django_pdfpool.contrib import drf, ninja
from django_pdfpool.door import arun_steps, ask_caller, run_steps
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD, held_job
from tests.test_decorators import upload

SOON = 60


def db_caller(request):
    """A project's sync CALLER, which reads the database (so never on an event loop)."""
    User.objects.exists()
    return "who:" + request.headers.get("X-Who", "nobody")


async def async_caller(request):
    """A project's async CALLER."""
    await asyncio.sleep(0)
    return "who:" + request.headers.get("X-Who", "nobody")


@pdf_pooled(job=held_job)
def plain_sync(request):
    return JsonResponse({"ran": True})


@pdf_pooled(job=held_job)
async def plain_async(request):
    return JsonResponse({"ran": True})


api = NinjaAPI(urls_namespace="pdfpool-callers")


@api.post("/sync")
@ninja.pdf_pooled(job=held_job)
def ninja_sync(request):
    return {"ran": True}


@api.post("/async")
@ninja.pdf_pooled(job=held_job)
async def ninja_async(request):
    return {"ran": True}


class Open(APIView):
    authentication_classes = ()
    permission_classes = (AllowAny,)
    parser_classes = (MultiPartParser,)

    @drf.pdf_pooled(job=held_job)
    def post(self, request):
        return Response({"ran": True})


class Routes:
    urlpatterns: ClassVar = [
        path("plain/sync/", plain_sync),
        path("plain/async/", plain_async),
        path("ninja/", api.urls),
        path("drf/", Open.as_view()),
    ]


ENTRIES = ["/plain/sync/", "/plain/async/", "/ninja/sync", "/ninja/async", "/drf/"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("setting", ["db_caller", "async_caller"])
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("door", [True, False])
def test_every_view_entry_names_the_caller_as_the_setting_does(pdfpool, setting, entry, door):
    """The job runs as the CALLER setting's caller, at every entry, for a sync CALLER that
    reads the database (run in a thread on async paths) and an async one."""
    pdfpool(CALLER=f"tests.test_callers.{setting}", DOOR=door)
    User.objects.create(username="someone")
    with override_settings(ROOT_URLCONF=Routes), held_requests(1) as threads:
        sent = threads.submit(
            Client(HTTP_X_WHO="alice").post, entry, {"file": upload(entry.encode() + b"%PDF-")}
        )
        wait_until(lambda: len(HELD.runs) == 1 or sent.done())
        assert not sent.done(), sent.result().content
        assert {job.caller for job in get_pool().snapshot().jobs} == {"who:alice"}
        HELD.release.set()
        assert sent.result(SOON).status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("setting", ["db_caller", "async_caller"])
def test_the_sync_and_async_pair_and_the_door_agree(pdfpool, rf, setting):
    pdfpool(CALLER=f"tests.test_callers.{setting}")
    request = rf.post("/", HTTP_X_WHO="bob")
    assert caller_of(request) == django_pdfpool.caller_of(request) == "who:bob"
    assert asyncio.run(acaller_of(request)) == "who:bob"
    asked = run_steps(ask_caller(request))
    assert asked == asyncio.run(arun_steps(ask_caller(request))) == "who:bob"


def unsure_caller(request):
    """A project's CALLER that cannot tell some requests apart, even with their body."""
    return request.headers.get("X-Who")


async def unsure_async_caller(request):
    return request.headers.get("X-Who")


@pytest.mark.parametrize("setting", ["unsure_caller", "unsure_async_caller"])
def test_a_caller_function_that_names_nobody_after_the_body_is_a_clear_error(pdfpool, rf, setting):
    """None is "not known yet" for the door only; with the body in, every such request would
    be one caller (and wait on each other's jobs)."""
    pdfpool(CALLER=f"tests.test_callers.{setting}")
    request = rf.post("/")
    for ask in (caller_of, lambda r: asyncio.run(acaller_of(r))):
        with pytest.raises(TypeError, match=r"CALLER.*non-empty string.*not None"):
            ask(request)
    assert run_steps(ask_caller(request)) is None  # the door: not known yet
    assert asyncio.run(acaller_of(rf.post("/", HTTP_X_WHO="ann"))) == "ann"
    with pytest.raises(TypeError, match="not ''"):
        caller_of(rf.post("/", HTTP_X_WHO=""))


def test_acaller_of_resolves_the_user_first_and_calls_the_librarys_own_on_the_loop(pdfpool, rf):
    """The default CALLER reads ``request.user``: ``acaller_of`` resolves it with
    ``auser()`` before (as Django's own async paths must), and no thread is needed."""
    request = rf.post("/", REMOTE_ADDR="10.9.0.1")
    user = type("Anonymous", (), {"is_authenticated": False, "pk": None})()

    async def auser():
        return user

    request.auser = auser
    assert asyncio.run(acaller_of(request)) == "ip:10.9.0.1"
    assert request.user is user


def test_only_callers_reads_the_caller_setting():
    """Caller resolution is written once: no other module reads ``get_settings().caller``."""
    package = Path(django_pdfpool.__file__).parent
    readers = set()
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "caller":
                value = node.value
                settings_call = (
                    isinstance(value, ast.Call)
                    and getattr(value.func, "id", None) == "get_settings"
                )
                if settings_call or (isinstance(value, ast.Name) and value.id == "conf"):
                    readers.add(module.relative_to(package).as_posix())
    assert readers == {"callers.py"}


def anonymous(remote: str, forwarded: str | None = None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    request = RequestFactory().post("/", REMOTE_ADDR=remote, **extra)
    request.user = AnonymousUser()
    return request


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_ipv6_callers_are_grouped_by_their_prefix(pdfpool, caller):
    def of(address: str) -> str:
        return caller(anonymous(address, address if caller is user_or_forwarded_ip else None))

    one_host = {of(f"2001:db8:1:2:{i:x}::{i:x}") for i in range(1, 50)}
    assert one_host == {"ip:2001:db8:1:2::/64"}
    assert of("2001:db8:1:3::1") != of("2001:db8:1:2::1")  # another /64, another caller
    assert of("2001:DB8:1:2:0:0:0:1") == of("2001:db8:1:2::1")  # one spelling
    assert address_caller("2001:db8:1:3::1", prefix=48) == "ip:2001:db8:1::/48"
    assert address_caller("2001:db8:1:2::1", prefix=48) == "ip:2001:db8:1::/48"
    assert address_caller("2001:db8:1:3::1", prefix=128) == "ip:2001:db8:1:3::1/128"


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_ipv4_mapped_addresses_are_their_ipv4_caller(pdfpool, caller):
    def of(address: str) -> str:
        return caller(anonymous(address, address if caller is user_or_forwarded_ip else None))

    assert of("::ffff:203.0.113.7") == of("203.0.113.7") == "ip:203.0.113.7"


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_an_address_that_does_not_parse_is_kept_as_it_is(pdfpool, caller):
    for odd in ("unknown", "not an address"):  # a port or brackets: tests/test_middleware.py
        request = anonymous(odd, odd if caller is user_or_forwarded_ip else None)
        assert caller(request) == f"ip:{odd}"


def test_forwarded_ipv6_behind_the_proxy_is_grouped_too(pdfpool):
    request = anonymous("10.0.0.1", "198.51.100.1, 2001:db8:7:7::9")
    assert user_or_forwarded_ip(request) == "ip:2001:db8:7:7::/64"
    assert user_or_ip(request) == "ip:10.0.0.1"


class ProxyUser:
    """A project's authentication from a header its proxy sets (as RemoteUserMiddleware
    does): no session cookie, no ``Authorization``, so the door, before it, sees an address."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if name := request.headers.get("X-Auth-User"):
            request.user = User(pk=ord(name[0]), username=name)
        return self.get_response(request)


@pdf_pooled(job=held_job)
async def whoami(request):
    return JsonResponse({"user": request.user.username})


class ProxiedRoutes:
    urlpatterns: ClassVar = [path("whoami/", whoami)]


def test_the_caller_is_asked_after_authentication_and_the_view_keeps_its_user(pdfpool, settings):
    """docs/door.md: ``@pdf_pooled`` always asks after authentication. Two users behind one
    proxy address are two callers (the door's answer from before authentication, their
    address, is not the job's caller), and the view gets the user the middleware set."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor
    from tests.support.door import answer_of, asgi_post

    settings.MIDDLEWARE = [*settings.MIDDLEWARE[:-1], "tests.test_callers.ProxyUser"]
    settings.ROOT_URLCONF = ProxiedRoutes
    pdfpool(SLOTS=2)
    door = PdfPoolDoor(get_asgi_application())

    def sent(user: str):
        body = f"%PDF- {user}'s".encode()
        request = asgi_post("/whoami/", body, (b"x-auth-user", user.encode()))
        return asyncio.run(answer_of(door, request, body))

    with held_requests(2) as threads:
        alice = threads.submit(sent, "alice")
        wait_until(lambda: get_pool().running() == 1 or alice.done())
        assert [job.caller for job in get_pool().snapshot().jobs] == [f"user:{ord('a')}"]
        bob = threads.submit(sent, "bob")
        wait_until(lambda: get_pool().running() == 2 or bob.done())
        assert not bob.done(), bob.result()
        HELD.release.set()
        answers = [alice.result(SOON), bob.result(SOON)]
    assert [(status, json.loads(body)) for status, body, _ in answers] == [
        (200, {"user": "alice"}),
        (200, {"user": "bob"}),
    ]


def test_a_row_of_another_model_that_says_it_is_authenticated_is_not_a_user(rf):
    """A framework's API client (a row of its own model, ``is_authenticated`` true) set as
    ``request.user`` or returned by ninja's auth is its model's caller, never the user's
    of the same primary key (the two would refuse each other 429)."""
    from django.contrib.auth.models import Group

    client = Group(pk=7, name="api client")
    client.is_authenticated = True
    request, same_pk = rf.post("/"), rf.post("/")
    request.user, same_pk.user = client, User(pk=7)
    assert user_or_ip(same_pk) == "user:7"
    assert user_or_ip(request) == "auth.group:7"
    request.auth, same_pk.auth = client, User(pk=7)
    assert ninja.auth_caller(request) == "auth.group:7"
    assert ninja.auth_caller(same_pk) == "user:7"


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_a_signed_in_user_without_a_primary_key_is_its_address_not_one_shared_caller(rf, caller):
    """A user an authentication built and never saved (claims of a token, say) has no key:
    ``user:None`` would make every such user one caller, each refused the others' 429."""
    alice, bob = rf.post("/", REMOTE_ADDR="10.0.9.1"), rf.post("/", REMOTE_ADDR="10.0.9.2")
    alice.user, bob.user = User(username="alice"), User(username="bob")
    assert (caller(alice), caller(bob)) == ("ip:10.0.9.1", "ip:10.0.9.2")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("url", ["/sync/", "/async/"])
def test_under_wsgi_the_session_and_the_user_are_read_once(pdfpool, url):
    """A signed-in user's upload through the door under WSGI (Django's handler, sync
    middleware): the door reads the user, and the view's decorator, sync or async, takes that
    user, as Django's own code would: one query for the session, one for the user."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.support import pdfs

    pdfpool(SLOTS=2)
    client = Client(REMOTE_ADDR="10.4.0.1")
    client.force_login(User.objects.create_user("once", password="pw"))
    field = "file" if url == "/sync/" else "document"
    with CaptureQueriesContext(connection) as read:
        answer = client.post(url, {field: upload(pdfs.simple(["once"]))})
    assert answer.status_code == 200
    tables = [query["sql"].split(" FROM ")[1].split()[0] for query in read.captured_queries]
    assert tables == ['"django_session"', '"auth_user"']
