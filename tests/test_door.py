"""The door: admission from a request's headers, before its body is read (docs/door.md).
Its rules one by one, then each decision through Django's test client (WSGI), with a
body that fails the test if anything reads it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import Client

from django_pdfpool import get_pool
from django_pdfpool.admission.ledger import Ledger
from django_pdfpool.admission.local import Pool
from django_pdfpool.admission.snapshot import Pressure
from django_pdfpool.door.headers import UploadHeaders, format_digest, is_post, parse_digest
from django_pdfpool.door.rules import ARRIVING, MULTIPART_SLACK, Arrivals, Terms, Ticket, decide
from django_pdfpool.exceptions import (
    BadDigest,
    CallerBusy,
    LengthRequired,
    PoolBusy,
    PoolClosed,
    RepeatedHeader,
    UploadTooLarge,
)
from tests import pdfs
from tests.conftest import held, held_requests, until, wait_until
from tests.views import HELD

pytest_plugins = ["tests.redis_fixtures"]

MiB = 1024 * 1024
JSON = {"HTTP_ACCEPT": "application/json"}
SOON = 30


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def headers(**values: str) -> UploadHeaders:
    return UploadHeaders.of({name.replace("_", "-"): value for name, value in values.items()})


def pressure(
    closed=False, free=1, in_flight=False, retry_after=2.5, caller_busy=False, caller_retry=9.0
) -> Pressure:
    return Pressure(closed, free, in_flight, retry_after, caller_busy, caller_retry)


TERMS = Terms(
    max_upload_size=MiB, budget=4, budget_bytes=10 * MiB, body_timeout=20, body_min_rate=500
)


NO_BUDGET = Terms(max_upload_size=MiB, budget=0, budget_bytes=0, body_timeout=20, body_min_rate=500)


def decided(upload, state, arrivals=None, key=None, who="ip:10.0.0.1", known=True, terms=TERMS):
    arrivals = arrivals if arrivals is not None else Arrivals()
    return decide(upload, key, state, arrivals, who=who, known=known, terms=terms)


def verdict(*args, **kwargs):
    return decided(*args, **kwargs)[0]


# --- headers ------------------------------------------------------------------------


def test_a_digest_is_read_as_rfc_9530_says():
    digest = sha(b"%PDF-1.7")
    assert parse_digest(format_digest(digest)) == digest
    assert (
        parse_digest(f"sha-512=:{base64.b64encode(b'x' * 64).decode()}:, " + format_digest(digest))
        == digest
    )
    assert parse_digest("sha-512=:AAAA:") is None  # only other algorithms: nothing declared
    for bad in ["sha-256=abc", "sha-256=:not base64!:", "sha-256=:AAAA:", "nonsense"]:
        with pytest.raises(BadDigest):
            parse_digest(bad)


def test_the_headers_say_size_form_expectation_and_digest():
    digest = sha(b"x")
    raw = headers(
        content_length="12", content_type="application/pdf", repr_digest=format_digest(digest)
    )
    assert (raw.declared_size, raw.raw, raw.digest, raw.chunked) == (12, True, digest, False)
    chunked = headers(
        transfer_encoding="chunked",
        content_type="application/pdf",
        expect="100-continue",
        repr_digest=format_digest(digest),
    )
    assert (chunked.declared_size, chunked.chunked, chunked.expects_continue) == (None, True, True)
    assert chunked.digest == digest
    form = headers(content_type="multipart/form-data; boundary=x", pdf_digest=format_digest(digest))
    assert form.digest == digest and not form.raw
    # a raw body's digest is in Repr-Digest or Content-Digest; Pdf-Digest is the form's
    assert headers(content_type="application/pdf", pdf_digest=format_digest(digest)).digest is None
    with pytest.raises(BadDigest):
        headers(
            content_type="application/pdf",
            repr_digest=format_digest(digest),
            content_digest=format_digest(sha(b"y")),
        )


def test_one_reading_of_the_request_as_django_reads_it():
    """The method as Django compares it; a repeated Content-Type or digest header is a
    400 (the door and Django would read them differently); a Content-Length list of
    equal values is that value; a chunked multipart form is 411 from the headers."""
    assert is_post("post") and is_post("POST") and not is_post("GET") and not is_post(None)
    pdf, form = ("content-type", "application/pdf"), ("content-type", "multipart/form-data; b=x")
    digest = ("repr-digest", format_digest(sha(b"x")))
    with pytest.raises(RepeatedHeader):
        UploadHeaders.of([form, pdf, digest])
    with pytest.raises(RepeatedHeader):
        UploadHeaders.of([pdf, digest, ("repr-digest", format_digest(sha(b"y")))])
    with pytest.raises(RepeatedHeader):  # the same two, joined by a server (WSGI)
        UploadHeaders.of(
            {
                "content-type": "application/pdf",
                "repr-digest": ",".join([format_digest(sha(b"x")), format_digest(sha(b"y"))]),
            }
        )
    with pytest.raises(RepeatedHeader):  # joined by a WSGI server
        UploadHeaders.of({"content-type": "multipart/form-data; boundary=b,application/pdf"})
    quoted = UploadHeaders.of({"content-type": 'multipart/form-data; boundary="a,b"'})
    assert not quoted.raw  # a comma in a quoted boundary is one header
    assert UploadHeaders.of([pdf, ("content-length", "811, 811")]).declared_size == 811
    assert (
        UploadHeaders.of([pdf, ("content-length", "811"), ("content-length", "811")]).declared_size
        == 811
    )
    assert UploadHeaders.of([pdf, ("content-length", "811, 812")]).declared_size is None
    with pytest.raises(LengthRequired) as chunked:
        UploadHeaders.of([form, ("transfer-encoding", "chunked")])
    assert chunked.value.status == 411
    with pytest.raises(RepeatedHeader):  # Django's own mapping: repeated names keep one
        UploadHeaders.of(
            [("Content-Type", "application/pdf"), ("content-type", "application/pdf; x")]
        )


# --- callers by address ---------------------------------------------------------------


def test_callers_by_address_are_normalized(pdfpool):
    """One host, one caller: a port or brackets stripped, IPv4 carried in IPv6 (mapped,
    NAT64's 64:ff9b::/96, IPv4-compatible) read as its IPv4 address, never one /64."""
    from django_pdfpool.callers import address_caller

    pdfpool()
    for form in ("2.2.2.2", "2.2.2.2:443", "::ffff:2.2.2.2", "[::ffff:2.2.2.2]:80", "::2.2.2.2"):
        assert address_caller(form) == "ip:2.2.2.2", form
    assert address_caller("64:ff9b::a00:1") == address_caller("[64:ff9b::10.0.0.1]:8080")
    assert address_caller("64:ff9b::a00:1") == "ip:10.0.0.1"
    assert address_caller("::10.0.0.1") != address_caller("::10.0.0.2")  # not one /64
    v6 = "ip:2001:db8::/64"
    assert address_caller("[2001:db8::1]") == address_caller("[2001:db8::1]:443") == v6
    assert address_caller("2001:db8::1") == v6
    assert address_caller("::1") == "ip:::/64"  # loopback: not an IPv4 address
    assert address_caller("unknown") == "ip:unknown"


def test_a_caller_function_tells_the_door_it_cannot_know_yet(pdfpool, rf):
    """Before authentication (the ASGI door) a request with a session cookie or an
    Authorization header may be a user's: ``user_or_ip`` says None, and the door neither
    answers 429 for it nor counts it by address, but for the budget's one per caller."""
    from django_pdfpool.callers import ASKING, user_or_ip

    pdfpool()
    anonymous = rf.post("/sync/", REMOTE_ADDR="10.7.0.1")
    cookie = rf.post("/sync/", REMOTE_ADDR="10.7.0.1", HTTP_COOKIE="sessionid=abc")
    bearer = rf.post("/sync/", REMOTE_ADDR="10.7.0.1", HTTP_AUTHORIZATION="Bearer x")
    for request in (anonymous, cookie, bearer):
        request.META[ASKING] = True
    assert user_or_ip(anonymous) == "ip:10.7.0.1"
    assert user_or_ip(cookie) is None and user_or_ip(bearer) is None
    del cookie.META[ASKING]  # the decorator asks after authentication: always an answer
    assert user_or_ip(cookie) == "ip:10.7.0.1"
    from django.contrib.auth.models import AnonymousUser

    token = rf.post("/sync/", REMOTE_ADDR="10.7.0.1", HTTP_AUTHORIZATION="Token t")
    token.user, anonymous.user = AnonymousUser(), AnonymousUser()  # after Django's auth
    token.META[ASKING] = True
    assert user_or_ip(token) is None  # a framework's token, read later in the view
    assert user_or_ip(anonymous) == "ip:10.7.0.1"


def users_only(request):
    """A project's CALLER written for the decorator: it reads ``request.user``."""
    return f"user:{request.user.pk}"


def test_a_caller_function_that_needs_the_user_does_not_break_the_door(pdfpool, rf):
    """Under ASGI the door asks before authentication: a function that reads
    ``request.user`` raises there, and the door takes it as "cannot know yet"."""
    from django_pdfpool.door.entry import awho, who_now

    pdfpool(CALLER="tests.test_door.users_only")
    request = rf.post("/sync/", REMOTE_ADDR="10.8.0.1")
    assert who_now(request) == ("ip:10.8.0.1", False)
    assert asyncio.run(awho(request)) == ("ip:10.8.0.1", False)


def test_the_body_settings_are_validated():
    from django_pdfpool.conf import problems

    for bad in (
        {"BODY_TIMEOUT": 0},
        {"BODY_TIMEOUT": "20"},
        {"BODY_MIN_RATE": 0},
        {"BODY_MIN_RATE": 1.5},
        {"DOOR_BUDGET": -1},
        {"DOOR_BUDGET_BYTES": -1},
        {"DOOR_DIGESTS": "yes"},
    ):
        assert [p.id for p in problems(bad)] == ["django_pdfpool.E003"], bad
    assert problems({"BODY_TIMEOUT": 0.5, "BODY_MIN_RATE": 1, "DOOR_BUDGET": 0}) == []
    assert [p.id for p in problems({"SHED_UNDECLARED": True})] == ["django_pdfpool.E002"]


# --- the decision --------------------------------------------------------------------


def test_a_closed_pool_refuses_first():
    assert isinstance(
        verdict(headers(content_length="10"), pressure(closed=True, free=6)), PoolClosed
    )


def test_a_declared_size_over_the_limit_is_413_with_the_forms_slack_only_for_forms():
    form, raw = {"content_type": "multipart/form-data"}, {"content_type": "application/pdf"}
    assert isinstance(
        verdict(headers(content_length=str(MiB + MULTIPART_SLACK + 1), **form), pressure()),
        UploadTooLarge,
    )
    assert isinstance(
        verdict(headers(content_length=str(MiB + MULTIPART_SLACK), **form), pressure()), Ticket
    )
    assert isinstance(
        verdict(headers(content_length=str(MiB + 1), **raw), pressure()), UploadTooLarge
    )
    assert isinstance(verdict(headers(content_length=str(MiB), **raw), pressure()), Ticket)


def test_a_full_pool_gives_its_own_busy_only_to_what_cannot_join():
    """A declared key not in flight cannot join: the pool's 503 (not a shed). An undeclared
    upload might: it goes in on the budget. A declared key in flight joins (budget too)."""
    full = pressure(free=0, retry_after=7.0)
    busy, shed = decided(headers(content_length="10"), full, key="k")
    assert isinstance(busy, PoolBusy) and busy.retry_after == 7.0 and not shed
    undeclared = verdict(headers(content_length="10"), full)
    assert isinstance(undeclared, Ticket) and undeclared.kind == "budget"
    joiner = verdict(headers(content_length="10"), pressure(free=0, in_flight=True), key="k")
    assert isinstance(joiner, Ticket) and joiner.kind == "budget"


def test_the_budget_is_bounded_in_bodies_and_bytes_and_one_per_caller():
    arrivals, full, upload = Arrivals(), pressure(free=0), headers(content_length=str(MiB))
    first = verdict(upload, full, arrivals, who="ip:1")
    again, shed = decided(upload, full, arrivals, who="ip:1")  # one per caller
    assert isinstance(first, Ticket) and isinstance(again, PoolBusy) and shed
    others = [verdict(upload, full, arrivals, who=f"ip:{i}") for i in range(2, 6)]
    assert [isinstance(v, Ticket) for v in others] == [True, True, True, False]  # 4 bodies
    assert decided(upload, full, arrivals, who="ip:6")[1]  # a shed, which the caller counts
    assert arrivals.own("ip:1") is first and arrivals.own("ip:6") is None
    small = Terms(MiB, budget=10, budget_bytes=MiB + 10, body_timeout=20, body_min_rate=500)
    arrivals = Arrivals()
    assert isinstance(verdict(upload, full, arrivals, who="ip:a", terms=small), Ticket)
    assert isinstance(
        verdict(headers(content_length="10"), full, arrivals, who="ip:b", terms=small), Ticket
    )
    assert isinstance(
        verdict(headers(content_length="10"), full, arrivals, who="ip:c", terms=small), PoolBusy
    )
    # chunked: its size is unknown, so it reserves the whole limit
    chunked = headers(transfer_encoding="chunked", content_type="application/pdf")
    assert isinstance(verdict(chunked, full, Arrivals(), terms=small), Ticket)
    assert isinstance(
        verdict(chunked, full, Arrivals(), terms=Terms(MiB, 10, MiB - 1, 20, 500)), PoolBusy
    )


def test_a_caller_with_a_job_in_flight_gets_the_pools_429():
    """Rule 2 before rule 3: a declared other key gets 429 with the held job's Retry-After;
    an undeclared upload may join (its own job, or another) and goes in on the budget, and
    past the budget gets the 429 too, as a shed. A caller the door cannot know yet never
    gets 429 from the door."""
    busy = pressure(free=0, caller_busy=True, caller_retry=9.0)
    refused, shed = decided(headers(content_length="10"), busy, key="other")
    assert isinstance(refused, CallerBusy) and refused.retry_after == 9.0 and not shed
    assert isinstance(
        verdict(headers(content_length="10"), pressure(caller_busy=True), key="k"), CallerBusy
    )
    arrivals = Arrivals()
    assert verdict(headers(content_length="10"), busy, arrivals).kind == "budget"
    past, shed = decided(headers(content_length="10"), busy, arrivals)
    assert isinstance(past, CallerBusy) and shed
    # a free place is not taken by a busy caller's upload: it can only join
    assert (
        verdict(headers(content_length="10"), pressure(free=3, caller_busy=True)).kind == "budget"
    )
    unknown = verdict(headers(content_length="10"), busy, key="other", known=False)
    assert isinstance(unknown, PoolBusy)


def test_a_released_ticket_wakes_who_waits_for_it_on_a_thread_or_a_loop():
    """A caller's next upload waits for the body it has arriving: in a sync request's
    thread, or as a future on its own loop woken by whichever thread releases it."""
    ticket = Arrivals().budget("ip:1", None, 10, TERMS)
    assert ticket is not None and not ticket.wait_released(0.01)  # not released: times out

    async def waits() -> bool:
        return await ticket.areleased(SOON)

    with contextlib.ExitStack() as stack:
        threads = stack.enter_context(ThreadPoolExecutor(2))
        on_a_loop = threads.submit(asyncio.run, waits())
        on_a_thread = threads.submit(ticket.wait_released, SOON)
        wait_until(lambda: len(ticket._watchers) == 2)
        ticket.release()
        assert on_a_loop.result(SOON) is True and on_a_thread.result(SOON) is True
    assert ticket.wait_released(0) and asyncio.run(ticket.areleased(0))  # released: at once
    late = Arrivals().budget("ip:2", None, 10, TERMS)
    assert late is not None and asyncio.run(late.areleased(0.01)) is False


def test_a_burst_is_let_in_only_as_far_as_there_are_places_and_the_budget():
    arrivals = Arrivals()
    upload = headers(content_length="10")
    decisions = [decided(upload, pressure(free=6), arrivals, who=f"ip:{i}") for i in range(200)]
    verdicts = [v for v, _ in decisions]
    places = [v for v in verdicts if isinstance(v, Ticket) and v.kind == "place"]
    budget = [v for v in verdicts if isinstance(v, Ticket) and v.kind == "budget"]
    assert (len(places), len(budget), arrivals.count) == (6, TERMS.budget, 6 + TERMS.budget)
    assert all(isinstance(v, PoolBusy) and shed for v, shed in decisions[6 + TERMS.budget :])
    places[0].release()
    places[0].release()  # idempotent
    assert arrivals.count == 5 + TERMS.budget
    assert verdict(upload, pressure(free=6), arrivals, who="ip:new").kind == "place"


def test_one_caller_takes_one_place():
    """Six connections from one address took six places: now the second goes to the
    budget (it can only join the first) and the third is shed."""
    arrivals, upload = Arrivals(), headers(content_length="10")
    kinds = [verdict(upload, pressure(free=6), arrivals, who="ip:one") for _ in range(3)]
    assert [getattr(k, "kind", None) for k in kinds] == ["place", "budget", None]


def test_an_upload_right_behind_an_identical_arriving_one_joins_it():
    arrivals = Arrivals()
    declared = headers(content_length="10", pdf_digest=format_digest(sha(b"x")))
    first = verdict(declared, pressure(free=1), arrivals, key="job:x", who="ip:1")
    assert isinstance(first, Ticket) and first.kind == "place"
    behind = verdict(declared, pressure(free=1), arrivals, key="job:x", who="ip:2")
    assert behind.kind == "budget"  # it joins: no place
    assert isinstance(
        verdict(declared, pressure(free=1), arrivals, key="job:y", who="ip:3"), PoolBusy
    )
    first.release()
    behind.release()
    assert not arrivals.carries("job:x")


def test_a_body_has_a_deadline_extended_by_its_rate_and_then_holds_nothing():
    """mod_reqtimeout's body=20,MinRate=500: 20 s, plus one per 500 bytes received."""
    arrivals = Arrivals()
    ticket = verdict(headers(content_length="10"), pressure(free=1), arrivals)
    assert ticket.deadline(TERMS) == ticket.started + 20
    ticket.received = 5000
    assert ticket.deadline(TERMS) == ticket.started + 30
    assert arrivals.expire(TERMS, now=ticket.started + 29.9) == [] and arrivals.count == 1
    assert arrivals.expire(TERMS, now=ticket.started + 30) == [ticket]
    assert arrivals.count == 0 and ticket.released and arrivals.timed_out == 1
    # the place it held is free for the next upload
    assert verdict(headers(content_length="10"), pressure(free=1), arrivals).kind == "place"


def test_a_trickle_just_above_the_rate_holds_its_place_body_timeout_max_at_most():
    """A 50 MiB body at 501 bytes a second would earn 29 hours; the cap is the bound."""
    capped = Terms(MiB, budget=4, budget_bytes=MiB, body_timeout=20, body_min_rate=500,
                   body_timeout_max=300)  # fmt: skip
    ticket = verdict(headers(content_length="10"), pressure(free=1), Arrivals(), terms=capped)
    ticket.received = 50 * MiB
    assert ticket.deadline(capped) == ticket.started + 300
    ticket.received = 1000
    assert ticket.deadline(capped) == ticket.started + 22  # below the cap: the rate's
    from django_pdfpool.conf import problems

    assert [p.id for p in problems({"BODY_TIMEOUT_MAX": 0})] == ["django_pdfpool.E003"]


def test_retry_after_is_never_below_what_the_pool_knows():
    """A job has run 15 s and none has finished: its caller is told about as long again,
    not a constant; never past the timeout; the queue's estimate counts running jobs."""
    books = Ledger(slots=1, ceiling=30.0)
    assert books.expected_end(15.0, 0) == 15.0
    assert Ledger(slots=1, ceiling=20.0).expected_end(15.0, 0) == 5.0  # the timeout's left
    assert books.expected_start(0, [15.0]) == 15.0
    books.ended("completed", 2.0)  # the typical job takes 2 s: this one is overdue
    assert books.expected_end(15.0, 0) == 15.0 and books.expected_end(0.5, 0) == 1.5


def test_a_callers_retry_time_grows_with_its_running_job(pdfpool):
    pdfpool(SLOTS=2, QUEUE=0)
    with held_requests(2) as threads:
        held = threads.submit(post, "/held/sync/", b"%PDF- long", "10.9.0.1")
        wait_until(
            lambda: get_pool().snapshot().jobs and get_pool().snapshot().jobs[0].running_for > 1.5
        )
        mine = post("/held/sync/", b"%PDF- another", "10.9.0.1")
        HELD.release.set()
        assert held.result(SOON).status_code == 200
    assert mine.status_code == 429 and int(mine["Retry-After"]) >= 2


# --- through Django (WSGI, AdmissionMiddleware) --------------------------------------


class UnreadBody(io.RawIOBase):
    """A request body that fails the test if anything reads it."""

    def __init__(self, fail: bool = True) -> None:
        self.touched = threading.Event()
        self.fail = fail

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.touched.set()
        if not self.fail:  # only noted (a test client in another thread would get the raise)
            return 0
        raise AssertionError("the door read the body of an upload it should refuse")


def post(url, data, ip="10.0.0.1", **extra):
    return Client(REMOTE_ADDR=ip).post(url, {"file": pdfs_upload(data)}, **JSON, **extra)


def pdfs_upload(data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")


def unread_post(url, size, ip="10.0.0.9", **extra):
    """A POST declaring ``size`` bytes whose body must not be read."""
    body = UnreadBody()
    environ = {
        "wsgi.input": body,
        "CONTENT_LENGTH": str(size),
        "CONTENT_TYPE": "multipart/form-data; boundary=x",
        **JSON,
        **extra,
    }
    response = Client(REMOTE_ADDR=ip).generic("POST", url, **environ)
    assert not body.touched.is_set()
    return response


def test_a_declared_size_over_the_limit_gets_413_unread(pdfpool):
    """Under WSGI the answer carries no hop-by-hop header (PEP 3333; wsgiref 500s on one):
    whether to close is the server's."""
    pdfpool(MAX_UPLOAD_SIZE=MiB)
    response = unread_post("/sync/", 200 * MiB)
    assert response.status_code == 413 and response.json()["error"] == "too_large"
    assert not response.has_header("Connection")


def test_a_closed_pool_gets_503_unread_and_other_views_pass(pdfpool):
    pdfpool()
    get_pool().close()
    response = unread_post("/sync/", 1000)
    assert response.status_code == 503 and response.json()["error"] == "closed"
    assert Client().post("/plain/", {"x": "1"}).status_code == 200  # not pooled: untouched


@contextlib.contextmanager
def opened_at_exit(settings: dict):
    """The gated view's gate, opened when the block ends, failed or not: the request held
    on it must end before ``held_requests`` waits for it."""
    gate = os.path.join(settings["TEMP_DIR"], "open")
    try:
        yield gate
    finally:
        open(gate, "w").close()


def digest_of(data: bytes) -> dict:
    return {"HTTP_PDF_DIGEST": format_digest(sha(data))}


def test_a_full_pool_refuses_unread_what_cannot_join_and_lets_joiners_in(pdfpool, tmp_path):
    """SLOTS 1, QUEUE 0, a job running: a declared other PDF gets 503 unread; an identical
    upload joins, declared or not (the undeclared one on the budget, hashed, then joined)."""
    settings = pdfpool(SLOTS=1, QUEUE=0)
    data = b"%PDF- gated"
    with held_requests(3) as threads, opened_at_exit(settings) as gate:
        first = threads.submit(post, "/gated/", data, "10.1.0.1")
        wait_until(lambda: get_pool().running() == 1)
        busy = unread_post("/gated/", 1000, "10.1.0.2", **digest_of(b"%PDF- other"))
        assert busy.status_code == 503 and busy.json()["error"] == "busy"
        assert int(busy["Retry-After"]) >= 1 and busy.json()["retry_after"] >= 1
        declared = threads.submit(post, "/gated/", data, "10.1.0.3", **digest_of(data))
        undeclared = threads.submit(post, "/gated/", data, "10.1.0.4")
        wait_until(lambda: get_pool().waiting(get_pool().snapshot().jobs[0].key) == 2)
        open(gate, "w").close()
        answers = [first.result(SOON), declared.result(SOON), undeclared.result(SOON)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].json() == answers[1].json() == answers[2].json()
    counters = get_pool().snapshot().counters
    assert (counters.started, counters.joined, counters.refused_busy) == (1, 2, 1)


def test_past_the_budget_the_door_sheds_and_counts_it_apart(pdfpool):
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR_BUDGET=0)
    shed_before = ARRIVING.shed
    with held_requests(1) as threads, opened_at_exit(settings) as gate:
        first = threads.submit(post, "/gated/", b"%PDF- gated", "10.2.0.1")
        wait_until(lambda: get_pool().running() == 1)
        shed = unread_post("/gated/", 1000, "10.2.0.2")
        assert shed.status_code == 503 and shed.json()["error"] == "busy"
        open(gate, "w").close()
        assert first.result(SOON).status_code == 200
    assert ARRIVING.shed == shed_before + 1
    assert get_pool().snapshot().counters.refused_busy == 0  # not the pool's refusal


class GatedBody(io.RawIOBase):
    """A body held back until ``gate`` is set: a caller's upload still arriving."""

    def __init__(self, data: bytes, gate: threading.Event) -> None:
        self.data, self.gate = io.BytesIO(data), gate

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.gate.wait(SOON)
        return self.data.readinto(buffer)


def gated_post(url: str, data: bytes, gate: threading.Event, ip: str):
    """A multipart upload of ``data`` whose body arrives once ``gate`` is set."""
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    body = encode_multipart(BOUNDARY, {"file": pdfs_upload(data)})
    environ = {
        "wsgi.input": GatedBody(body, gate),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": MULTIPART_CONTENT,
        **JSON,
    }
    return Client(REMOTE_ADDR=ip).generic("POST", url, **environ)


def test_a_callers_next_upload_waits_for_its_body_arriving_then_joins(pdfpool):
    """One body per caller arrives at a time, but a caller's second upload is not shed
    for it: it waits, holding nothing, until the first body reaches the pool, then gets
    the pool's answer (here: both join the job in flight). Nothing counts as shed."""
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR_BUDGET=4)
    data, gate, shed = b"%PDF- gated twins", threading.Event(), ARRIVING.shed
    with held_requests(3) as threads, opened_at_exit(settings) as opened:
        first = threads.submit(post, "/gated/", data, "10.4.0.1")
        wait_until(lambda: get_pool().running() == 1)
        arriving = threads.submit(gated_post, "/gated/", data, gate, "10.4.0.2")
        wait_until(lambda: ARRIVING.own("ip:10.4.0.2") is not None)
        second = threads.submit(post, "/gated/", data, "10.4.0.2")
        own = ARRIVING.own("ip:10.4.0.2")
        wait_until(lambda: own is not None and len(own._watchers) == 1)  # the second waits
        assert not second.done()
        gate.set()
        key = get_pool().snapshot().jobs[0].key
        wait_until(lambda: get_pool().waiting(key) == 2)  # the twin and the second joined
        open(opened, "w").close()
        answers = [first.result(SOON), arriving.result(SOON), second.result(SOON)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert ARRIVING.shed == shed and get_pool().snapshot().counters.joined == 2


def test_a_callers_wait_for_its_own_body_is_bounded_then_shed(pdfpool):
    """A caller whose body never arrives: its next upload waits at most BODY_TIMEOUT,
    then is shed from the headers (counted as a shed), unread."""
    settings = pdfpool(SLOTS=1, QUEUE=0, BODY_TIMEOUT=1.0)
    gate, shed = threading.Event(), ARRIVING.shed
    with held_requests(2) as threads, opened_at_exit(settings) as opened:
        first = threads.submit(post, "/gated/", b"%PDF- running", "10.5.0.1")
        wait_until(lambda: get_pool().running() == 1)
        silent = threads.submit(gated_post, "/gated/", b"%PDF- silent", gate, "10.5.0.2")
        wait_until(lambda: ARRIVING.own("ip:10.5.0.2") is not None)
        second = unread_post("/gated/", 1000, "10.5.0.2")
        assert second.status_code == 503 and second.json()["error"] == "busy"
        assert ARRIVING.shed == shed + 1
        gate.set()
        open(opened, "w").close()
        assert first.result(SOON).status_code == 200
        assert silent.result(SOON).status_code in (200, 408, 503)  # in time or not: a race


def test_a_busy_caller_gets_429_from_the_headers(pdfpool):
    """The caller (by address here; the user under WSGI, after authentication) holds a
    job: another declared PDF gets the pool's 429 unread, counted as the pool's."""
    settings = pdfpool(SLOTS=2, QUEUE=0)
    with held_requests(1) as threads, opened_at_exit(settings) as gate:
        first = threads.submit(post, "/gated/", b"%PDF- mine", "10.3.0.1")
        wait_until(lambda: get_pool().running() == 1)
        mine = unread_post("/gated/", 1000, "10.3.0.1", **digest_of(b"%PDF- mine too"))
        assert mine.status_code == 429 and mine.json()["error"] == "caller_busy"
        open(gate, "w").close()
        assert first.result(SOON).status_code == 200
    assert get_pool().snapshot().counters.refused_caller == 1


@pytest.mark.django_db(transaction=True)
def test_under_wsgi_the_door_knows_the_signed_in_user(pdfpool):
    from django.contrib.auth.models import User

    settings = pdfpool(SLOTS=2, QUEUE=0)
    user = User.objects.create_user("door", password="pw")
    client = Client(REMOTE_ADDR="10.4.0.1")
    client.force_login(user)
    with held_requests(1) as threads, opened_at_exit(settings) as gate:
        first = threads.submit(client.post, "/gated/", {"file": pdfs_upload(b"%PDF- held")}, **JSON)
        wait_until(lambda: get_pool().running() == 1)
        assert get_pool().snapshot().jobs[0].caller == f"user:{user.pk}"
        body = UnreadBody()
        mine = client.generic(
            "POST",
            "/gated/",
            **{
                "wsgi.input": body,
                "CONTENT_LENGTH": "1000",
                "CONTENT_TYPE": "multipart/form-data; boundary=x",
                "REMOTE_ADDR": "10.4.0.2",  # another address, the same user
                **JSON,
                **digest_of(b"%PDF- other"),
            },
        )
        assert not body.touched.is_set()
        assert mine.status_code == 429
        open(gate, "w").close()
        assert first.result(SOON).status_code == 200


def test_door_digests_off_reads_the_body_instead_of_answering_from_a_digest(pdfpool):
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR_DIGESTS=False)
    with held_requests(1) as threads, opened_at_exit(settings) as gate:
        first = threads.submit(post, "/gated/", b"%PDF- gated", "10.5.0.1")
        wait_until(lambda: get_pool().running() == 1)
        body = UnreadBody(fail=False)
        environ = {"wsgi.input": body, "CONTENT_LENGTH": "1000", **digest_of(b"%PDF- other")}
        environ["CONTENT_TYPE"] = "multipart/form-data; boundary=x"
        let_in = Client(REMOTE_ADDR="10.5.0.2").generic("POST", "/gated/", **environ, **JSON)
        assert body.touched.is_set() and let_in.status_code == 400  # read: no PDF in it
        open(gate, "w").close()
        assert first.result(SOON).status_code == 200


class SlowBody(io.RawIOBase):
    """A body that sends one byte per read, ``pause`` seconds apart: a trickle."""

    def __init__(self, size: int, pause: float) -> None:
        self.left, self.pause = size, pause

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.left:
            return 0
        import time

        time.sleep(self.pause)
        buffer[0] = ord("x")
        self.left -= 1
        return 1


def test_a_trickling_body_under_wsgi_gets_408_and_gives_its_place_back(pdfpool):
    pdfpool(SLOTS=1, QUEUE=0, BODY_TIMEOUT=0.5, BODY_MIN_RATE=1000)
    timed_out = ARRIVING.timed_out
    environ = {
        "wsgi.input": SlowBody(10_000, 0.05),
        "CONTENT_LENGTH": "10000",
        "CONTENT_TYPE": "application/pdf",
        **JSON,
    }
    response = Client(REMOTE_ADDR="10.6.0.1").generic("POST", "/sync/", **environ)
    assert response.status_code == 408 and response.json()["error"] == "body_timeout"
    assert ARRIVING.count == 0 and ARRIVING.timed_out == timed_out + 1
    assert get_pool().snapshot().counters.started == 0


def test_a_lowercase_post_and_a_chunked_form_meet_the_door(pdfpool):
    pdfpool(MAX_UPLOAD_SIZE=MiB)
    lower = unread_post("/sync/", 200 * MiB, REQUEST_METHOD="post")
    assert lower.status_code == 413
    chunked = unread_post("/sync/", 10, HTTP_TRANSFER_ENCODING="chunked")
    assert chunked.status_code == 411 and chunked.json()["error"] == "length_required"


def test_a_raw_pdf_body_is_extracted(pdfpool):
    pdfpool()
    data = pdfs.simple(["raw body"])
    response = Client().post(
        "/sync/",
        data,
        content_type="application/pdf",
        **JSON,
        HTTP_REPR_DIGEST=format_digest(sha(data)),
    )
    assert response.status_code == 200
    assert "raw body" in response.json()["pdf"]["text"]


def test_a_lying_digest_is_400_and_runs_nothing(pdfpool):
    pdfpool()
    data = pdfs.simple(["lie"])
    for form in ("raw", "multipart"):
        if form == "raw":
            response = Client().post(
                "/sync/",
                data,
                content_type="application/pdf",
                **JSON,
                HTTP_CONTENT_DIGEST=format_digest(sha(b"other")),
            )
        else:
            response = post("/sync/", data, HTTP_PDF_DIGEST=format_digest(sha(b"other")))
        assert response.status_code == 400 and response.json()["error"] == "digest_mismatch"
    counters = get_pool().snapshot().counters
    assert counters.started == counters.joined == 0
    assert os.listdir(pdfpool()["TEMP_DIR"]) == []


def test_an_unreadable_digest_is_400_before_the_body(pdfpool):
    pdfpool()
    response = unread_post("/sync/", 1000, HTTP_PDF_DIGEST="sha-256=:nope:")
    assert response.status_code == 400 and response.json()["error"] == "bad_digest"


def test_a_raw_body_over_the_limit_is_413(pdfpool):
    pdfpool(MAX_UPLOAD_SIZE=1024)
    response = Client().post(
        "/sync/", b"%PDF-" + b"x" * 2048, content_type="application/pdf", **JSON
    )
    assert response.status_code == 413
    assert os.listdir(pdfpool(MAX_UPLOAD_SIZE=1024)["TEMP_DIR"]) == []


def test_the_door_off_reads_every_body(pdfpool):
    pdfpool(DOOR=False)
    get_pool().close()
    with pytest.raises(AssertionError, match="read the body"):
        unread_post("/sync/", 1000)


# --- one refusal view for the decorator, the middleware and the door ----------------


def project_refusal(request, exception):
    from django.http import HttpResponse

    return HttpResponse(f"refused: {type(exception).__name__} {exception.code}", status=499)


def test_refusal_view_answers_for_the_decorator_the_middleware_and_the_door(pdfpool):
    pdfpool(REFUSAL_VIEW="tests.test_door.project_refusal", MAX_UPLOAD_SIZE=MiB)
    no_upload = Client().post("/sync/", {"x": "1"})  # the decorator's own check
    assert (no_upload.status_code, no_upload.content) == (499, b"refused: NoUpload no_upload")
    door = unread_post("/sync/", 200 * MiB)
    assert (door.status_code, door.content) == (499, b"refused: UploadTooLarge too_large")
    get_pool().close()
    direct = Client().post("/direct/sync/?key=k", {})  # AdmissionMiddleware
    assert (direct.status_code, direct.content) == (499, b"refused: PoolClosed closed")
    # a view's own answer= still wins over the setting
    own = unread_post("/own-answers/", 1000)
    assert own.status_code == 418 and own.json()["mine"] == "closed"


# --- what the door reads of each pool ------------------------------------------------


def check_pressure(pool) -> None:
    """One slot, one queue place: free places, the key in flight, closed; a door refusal
    counted in the pool's counters."""
    gate = threading.Event()

    async def scenario():
        assert pool.pressure("k1") == Pressure(False, 2, False, pool.pressure().retry_after)
        running = asyncio.ensure_future(pool.run("k1", "c1", held("r1", gate)))
        await until(lambda: pool.running() == 1)
        after_one = pool.pressure("k1")
        assert (after_one.free, after_one.in_flight) == (1, True)
        assert pool.pressure("k2").in_flight is False
        queued = asyncio.ensure_future(pool.run("k2", "c2", held("r2", gate)))
        await until(lambda: pool.queued() == 1)
        full = pool.pressure(None)
        assert full.free == 0 and full.retry_after > 0
        assert pool.pressure("k3", "c1").caller_busy  # c1 holds k1: 429 for another key
        assert pool.pressure(None, "c1").caller_busy
        assert not pool.pressure("k1", "c1").caller_busy  # its own key: it joins
        assert not pool.pressure("k2", "c1").caller_busy  # a job in flight: it joins too
        assert not pool.pressure("k3", "c9").caller_busy and not pool.pressure("k3").caller_busy
        assert pool.pressure("k3", "c1").caller_retry_after > 0
        pool.count_refusal(PoolBusy("at the door"))
        await until(lambda: pool.snapshot().counters.refused_busy == 1)  # Redis: soon
        gate.set()
        assert await running == "r1" and await queued == "r2"
        pool.close()
        assert pool.pressure().closed

    asyncio.run(scenario())


def test_the_local_pool_tells_the_door_its_pressure():
    check_pressure(Pool(1, 1, 10.0))


def test_the_redis_pool_tells_the_door_the_clusters_pressure(make_pool):
    pool = make_pool(1, 1, 10.0)
    assert pool.blocking_reads
    check_pressure(pool)


def test_the_door_answers_on_the_event_loop_only_with_the_librarys_own_answers(pdfpool):
    """A project's refusal view or ``answer=`` may render templates or read the database:
    the ASGI door runs those in a thread, and only those (bench_load: a thread hop per
    refusal cost the example's API 35 ms at p99 in a burst)."""
    from django_pdfpool import html_answer, json_answer
    from django_pdfpool.responses import answers_quickly, error_answer

    pdfpool()
    assert answers_quickly(None) and answers_quickly(json_answer) and answers_quickly(html_answer)
    assert answers_quickly(error_answer)
    assert not answers_quickly(lambda request, status, code, message, retry_after: None)
    pdfpool(REFUSAL_VIEW="tests.test_door.project_refusal")
    assert not answers_quickly(None) and answers_quickly(json_answer)


def db_refusal(request, exception):
    """A refusal view that reads the database, as a project's may."""
    from django.contrib.auth.models import User
    from django.http import HttpResponse

    return HttpResponse(f"{exception.code}: {User.objects.count()} users", status=499)


@pytest.mark.django_db(transaction=True)
def test_a_refusal_view_may_read_the_database_from_async_views_too(pdfpool):
    """For an async view (or the pool's refusal of a sync one, met on an event loop) the
    project's refusal view runs in a worker thread, where the ORM may be used."""
    pdfpool(REFUSAL_VIEW="tests.test_door.db_refusal", DOOR=False)  # the pool answers
    no_upload = Client().post("/async/", {"x": "1"})  # the async view's own check
    assert (no_upload.status_code, no_upload.content) == (499, b"no_upload: 0 users")
    get_pool().close()  # the pool refuses (inside async_to_sync for the sync view)
    for url in ("/sync/", "/async/"):
        field = "document" if url == "/async/" else "file"
        closed = Client().post(url, {field: pdfs_upload(pdfs.simple(["x"]))})
        assert (closed.status_code, closed.content) == (499, b"closed: 0 users"), url


def test_the_metrics_count_the_bodies_held_what_was_shed_and_what_timed_out(pdfpool):
    from django_pdfpool.door.rules import ARRIVING
    from django_pdfpool.status.metrics import render

    pdfpool()
    upload = headers(content_length="10")
    shed, timed_out = ARRIVING.shed, ARRIVING.timed_out
    place = verdict(upload, pressure(free=1), ARRIVING, who="ip:metrics-1")
    budget = verdict(upload, pressure(free=0), ARRIVING, who="ip:metrics-2")
    verdict(upload, pressure(free=0), ARRIVING, who="ip:metrics-3", terms=NO_BUDGET)
    ARRIVING.count_shed()  # what the door's entry counts for that shed
    text = render(get_pool().snapshot(), timeout=30.0, pid=1)
    assert 'pdfpool_door_held{kind="place"} 1' in text
    assert 'pdfpool_door_held{kind="budget"} 1' in text
    assert f"pdfpool_door_shed_total {shed + 1}" in text
    place.time_out()
    budget.release()
    text = render(get_pool().snapshot(), timeout=30.0, pid=1)
    assert 'pdfpool_door_held{kind="place"} 0' in text
    assert f"pdfpool_door_timed_out_total {timed_out + 1}" in text
