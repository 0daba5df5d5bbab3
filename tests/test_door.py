"""The door's rules one by one (``decide()`` and the arrivals): size, closed, a full
pool, the budget, one job per caller, joins, bodies' deadlines, Retry-After."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import Client

from django_pdfpool import get_pool
from django_pdfpool.admission.ledger import Ledger
from django_pdfpool.door import Arrivals, Terms, Ticket, door_status, terms
from django_pdfpool.exceptions import (
    CallerBusy,
    PoolBusy,
    PoolClosed,
    UploadTooLarge,
)
from django_pdfpool.record import MULTIPART_SLACK, format_digest
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD
from tests.support.door import (
    FORM_TYPE,
    MINE,
    SOON,
    TERMS,
    THEIRS,
    MiB,
    answer_of,
    asgi_post,
    decided,
    form,
    headers,
    post,
    pressure,
    sha,
    verdict,
)

pytest_plugins = ["tests.support.redis_fixtures"]


def users_only(request):
    """A project's CALLER written for the decorator: it reads ``request.user``."""
    return f"user:{request.user.pk}"


def test_callers_by_address_are_normalized(pdfpool):
    """One host, one caller: a port or brackets stripped, IPv4 carried in IPv6 (mapped,
    NAT64's 64:ff9b::/96, IPv4-compatible) read as its IPv4 address, never one /64."""
    from django_pdfpool.callers import address_caller

    pdfpool()
    for written in ("2.2.2.2", "2.2.2.2:443", "::ffff:2.2.2.2", "[::ffff:2.2.2.2]:80", "::2.2.2.2"):
        assert address_caller(written) == "ip:2.2.2.2", written
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


def test_a_caller_function_that_needs_the_user_does_not_break_the_door(pdfpool, rf):
    """Under ASGI the door asks before authentication: a function that reads
    ``request.user`` raises there, and the door takes it as "cannot know yet"."""
    from django_pdfpool.door import arun_steps, ask_caller, run_steps

    pdfpool(CALLER="tests.test_door.users_only")
    request = rf.post("/sync/", REMOTE_ADDR="10.8.0.1")
    assert run_steps(ask_caller(request)) is None  # not known yet: the door counts the address
    assert asyncio.run(arun_steps(ask_caller(request))) is None


def test_the_body_settings_are_validated():
    from django_pdfpool.conf import problems

    for bad in (
        {"BODY_TIMEOUT": 0},
        {"BODY_TIMEOUT": "20"},
        {"BODY_MIN_RATE": 0},
        {"BODY_MIN_RATE": 1.5},
        {"BUDGET": -1},
        {"BUDGET_BYTES": -1},
        {"DIGESTS": "yes"},
    ):
        assert [p.id for p in problems({"DOOR": bad})] == ["django_pdfpool.E003"], bad
    assert problems({"DOOR": {"BODY_TIMEOUT": 0.5, "BODY_MIN_RATE": 1, "BUDGET": 0}}) == []
    assert [p.id for p in problems({"SHED_UNDECLARED": True})] == ["django_pdfpool.E002"]


def test_a_closed_pool_refuses_first_but_for_a_size_over_the_limit():
    """The decorator's order: a declared size over the limit is 413 even while closing."""
    assert isinstance(
        verdict(headers(content_length="10"), pressure(closed=True, free=6)), PoolClosed
    )
    too_large = headers(content_length=str(2 * MiB), content_type="application/pdf")
    assert isinstance(verdict(too_large, pressure(closed=True, free=6)), UploadTooLarge)


def test_a_declared_size_over_the_limit_is_413_with_the_forms_slack_only_for_forms():
    form, raw = (
        {"content_type": "multipart/form-data; boundary=b"},
        {"content_type": "application/pdf"},
    )
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


def test_a_caller_joins_each_job_in_flight_it_names_on_an_entry_of_its_own():
    """A declared key in flight is a certain join: the caller gets an entry for each such
    job, one per key, ``caller_entries`` (1 + SLOTS + QUEUE) at most even as jobs end and
    others start. Anything else it sends on the budget, a key only carried by a body on its
    way or that one may start too, takes its one entry."""
    terms = Terms(MiB, budget=50, budget_bytes=10 * MiB, body_timeout=20, body_min_rate=500,
                  caller_entries=3)  # fmt: skip
    arrivals, upload = Arrivals(), headers(content_length="10")
    flight = pressure(free=0, in_flight=True)

    def entry(key, who="ip:1", state=flight):
        return decided(upload, state, arrivals, key=key, who=who, terms=terms)

    a, b = entry("job:a")[0], entry("job:b")[0]
    assert isinstance(a, Ticket) and isinstance(b, Ticket) and a.kind == b.kind == "budget"
    again, shed = entry("job:a")
    assert isinstance(again, PoolBusy) and shed
    assert arrivals.own("ip:1", "job:a") is a and arrivals.own("ip:1", "job:b") is b
    assert entry(None, state=pressure(free=0))[1]  # undeclared: shed
    assert entry("job:c")[0].kind == "budget"  # its third
    assert [entry(f"job:{n}")[1] for n in range(5)] == [True] * 5  # churn: never a fourth
    assert entry("job:x", who="ip:2")[0].kind == "budget"  # a body declaring job:x arrives
    assert entry("job:a", who="ip:4")[0].kind == "budget"
    assert entry("job:x", who="ip:4", state=pressure(free=0))[1]  # carried, not in flight
    arrivals = Arrivals()  # the budget's count aside
    full = pressure(free=0)
    assert entry(None, "ip:3", pressure(free=1))[0].kind == "place"  # it may start any job
    assert entry("job:r1", "ip:3", full)[0].kind == "budget"  # so a key it names may join
    second, shed = entry("job:r2", "ip:3", full)
    assert isinstance(second, PoolBusy) and shed and arrivals.count == 2


def test_a_callers_entries_are_one_and_one_per_job_that_can_be_in_flight(pdfpool):
    pdfpool(SLOTS=3, QUEUE=5, DOOR={"BUDGET": 20})
    assert (terms().budget, terms().caller_entries) == (20, 9)


def test_budget_bytes_are_charged_as_they_arrive_not_as_declared():
    """A body declaring 50 MiB holds its share of the budget (``budget_bytes / budget``)
    until more of it arrives, not 50 MiB: tricklers declaring the limit keep nobody out.
    Bytes past a share are charged as they come; the body whose bytes take the budget
    past ``budget_bytes`` is told so (shed), and a released entry gives back all it held."""
    terms = Terms(64 * MiB, budget=4, budget_bytes=4 * MiB, body_timeout=20, body_min_rate=500)
    arrivals, full = Arrivals(), pressure(free=0)
    declared = headers(content_length=str(50 * MiB), content_type="application/pdf")
    chunked = headers(transfer_encoding="chunked", content_type="application/pdf")
    entries = [verdict(declared, full, arrivals, who=f"ip:{i}", terms=terms) for i in range(3)]
    entries.append(verdict(chunked, full, arrivals, who="ip:3", terms=terms, framework=False))
    assert [e.reserved for e in entries] == [MiB] * 4  # 200 MiB declared, 4 MiB held
    assert entries[0].arrived(MiB, terms)  # within its share
    assert not entries[0].arrived(1, terms)  # past budget_bytes: shed
    entries[0].release()
    assert entries[1].arrived(MiB + 1, terms)  # what the first held is free again
    small = verdict(headers(content_length="10"), full, arrivals, who="ip:4", terms=terms)
    assert isinstance(small, Ticket) and small.reserved == 10


def test_a_body_past_the_budget_is_shed_alone():
    """The chunk that would take the budget past ``budget_bytes`` is refused and not
    counted: the other entries' chunks within their shares still pass, and a new entry
    still finds the bytes its body left, before the shed one is released."""
    terms = Terms(10**7, budget=5, budget_bytes=5000, body_timeout=20, body_min_rate=500)
    arrivals, full, upload = Arrivals(), pressure(free=0), headers(content_length="50000")
    entries = [verdict(upload, full, arrivals, who=f"ip:{i}", terms=terms) for i in range(4)]
    assert [e.reserved for e in entries] == [1000] * 4
    assert entries[0].arrived(1900, terms)  # 900 past its share: what the fifth would hold
    assert not entries[0].arrived(1500, terms)  # this chunk would take 1500 more: shed
    assert entries[1].arrived(500, terms) and entries[2].arrived(1000, terms)  # own shares
    assert isinstance(verdict(upload, full, arrivals, who="ip:5", terms=terms), PoolBusy)
    small = verdict(headers(content_length="100"), full, arrivals, who="ip:6", terms=terms)
    assert isinstance(small, Ticket) and small.reserved == 100  # the 100 B left
    assert not entries[3].arrived(1001, terms)  # 1 past its share, 1 past the budget
    assert entries[3].arrived(1000, terms)


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

    assert [p.id for p in problems({"DOOR": {"BODY_TIMEOUT_MAX": 0}})] == ["django_pdfpool.E003"]


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


def test_sizes_prove_what_cannot_join_a_full_pool():
    """A file is never larger than the body carrying it, and a raw PDF body is the file:
    with the pool full, an upload whose declared size is no job's in flight gets the pool's
    503 (429 for a busy caller) from its headers, not a budget entry; one that may be a
    job's goes in on the budget; with a job's size unknown, or places held by bodies
    arriving (the pool itself not full), nothing is proven."""
    from django_pdfpool.admission.ledger import Pressure

    def full(sizes, free=0, busy=False):
        return Pressure(False, free, False, 2.0, busy, 9.0, sizes)

    form = {"content_type": "multipart/form-data; boundary=b"}
    small = headers(content_length="30000", **form)
    refused, shed = decided(small, full((2_800_000,)))
    assert isinstance(refused, PoolBusy) and not shed  # the pool's own answer, counted
    busy, shed = decided(small, full((2_800_000,), busy=True))
    assert isinstance(busy, CallerBusy) and not shed
    big = Terms(4 * MiB, budget=4, budget_bytes=10 * MiB, body_timeout=20, body_min_rate=500)
    exact = headers(content_length="2800000", content_type="application/pdf")
    other = headers(content_length="2800001", content_type="application/pdf")
    assert verdict(exact, full((2_800_000,)), terms=big).kind == "budget"
    assert isinstance(verdict(other, full((2_800_000,)), terms=big), PoolBusy)
    assert verdict(small, full((20_000,))).kind == "budget"  # it may carry that file
    assert verdict(small, full(None)).kind == "budget"  # a size unknown: no proof
    arrivals = Arrivals()
    assert verdict(small, full((2_800_000,), free=1), arrivals, who="ip:x").kind == "place"
    assert verdict(small, full((2_800_000,), free=1), arrivals).kind == "budget"  # not full


def parsed_file_size(body: bytes, boundary: str, field: str) -> int | None:
    """The size of the file Django's MultiPartParser takes from ``body``'s ``field``."""
    import io

    from django.core.files.uploadhandler import MemoryFileUploadHandler
    from django.http.multipartparser import MultiPartParser, MultiPartParserError

    meta = {
        "CONTENT_TYPE": f'multipart/form-data; boundary="{boundary}"',
        "CONTENT_LENGTH": str(len(body)),
    }
    parser = MultiPartParser(meta, io.BytesIO(body), [MemoryFileUploadHandler()])
    try:
        found = parser.parse()[1].get(field)
    except MultiPartParserError:
        return None
    return None if found is None else found.size


def test_a_form_is_at_most_its_body_less_the_smallest_envelope():
    """The smallest body Django's parser takes a file from (no opening boundary, the
    closing one and a byte after it) carries a file the door's bound allows, one byte
    loose at most; with any byte of that envelope less, Django takes no such file."""
    for boundary, field in (("bb", "file"), ("a'b(c)+d_e-f", "pdf")):
        head = f"content-disposition:;name={field};filename=x\r\n\r\n".encode()
        tail, pdf = f"--{boundary}-".encode(), b"%PDF-1.4 " + b"x" * 1000
        envelope = head + tail
        body = head + pdf + tail
        assert parsed_file_size(body, boundary, field) == len(pdf)
        form = headers(
            content_length=str(len(body)),
            content_type=f'multipart/form-data; boundary="{boundary}"',
        )
        low, high = form.file_sizes(field)
        assert low == 0 and high is not None and len(pdf) <= high <= len(pdf) + 1
        for gone in range(len(envelope)):
            shorter = envelope[:gone] + envelope[gone + 1 :]
            cut = len(head) - (gone < len(head))
            less = shorter[:cut] + pdf + shorter[cut:]
            assert parsed_file_size(less, boundary, field) != len(pdf)
    assert headers(content_length="1000", content_type="application/pdf").file_sizes("f") == (
        1000,
        1000,
    )
    assert headers(transfer_encoding="chunked", content_type="application/pdf").file_sizes("f") == (
        0,
        None,
    )


def test_a_body_neither_a_form_nor_a_pdf_proves_no_size():
    """Only a raw PDF and a multipart form with its boundary tell the file's size: any
    other body (a framework's parser may take it whole) is never refused on its size."""
    from django_pdfpool.admission.ledger import Pressure

    full = Pressure(False, 0, False, 2.0, False, 9.0, (2_800_000,))
    for content_type in ("application/octet-stream; boundary=b", "text/plain", ""):
        body = headers(content_length="30000", content_type=content_type)
        assert verdict(body, full).kind == "budget"  # it may be that job's: it may join
        assert body.file_sizes("file") == (0, None)


def test_the_door_counts_anonymous_callers_per_network():
    """One host with many addresses holds one place: /24 for IPv4, the /64 an IPv6
    caller is already; a user is counted as itself."""
    from django_pdfpool.callers import network_of

    assert network_of("ip:203.0.113.7") == network_of("ip:203.0.113.200") == "ip:203.0.113.0/24"
    assert network_of("ip:203.0.114.7") != network_of("ip:203.0.113.7")
    assert network_of("ip:2001:db8::/64") == "ip:2001:db8::/64"
    assert network_of("user:7") == "user:7" and network_of("ip:unknown") == "ip:unknown"


def csrf_reason(request, reason=""):
    """A CSRF_FAILURE_VIEW that says why."""
    from django.http import HttpResponseForbidden

    return HttpResponseForbidden(reason)


def test_djangos_csrf_checks_from_the_headers_are_asked(rf, settings):
    """CsrfViewMiddleware's own 403 where it refuses from the headers, in its order: a foreign
    Origin (the site's own and a trusted one pass), under HTTPS without one a foreign Referer,
    then no CSRF cookie (unless CSRF_USE_SESSIONS: the session's secret is Django's to check);
    without the middleware, or for Django's test client, nothing is checked."""
    from django.middleware.csrf import REASON_BAD_ORIGIN, REASON_NO_CSRF_COOKIE

    from django_pdfpool.door import csrf_refusal

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://partner.example"]
    settings.CSRF_FAILURE_VIEW = "tests.test_door.csrf_reason"
    cookie = {"HTTP_COOKIE": f"csrftoken={'A' * 32}"}

    def post(origin, **extra):
        return rf.post("/sync/", HTTP_ORIGIN=origin, **cookie, **extra)

    def reason(request):
        refused = csrf_refusal(request)
        return None if refused is None else refused().content.decode()

    assert reason(post("https://evil.example")) == REASON_BAD_ORIGIN % "https://evil.example"
    assert reason(post("http://testserver")) is None
    assert reason(post("https://partner.example")) is None
    assert reason(rf.post("/sync/", **cookie)) is None  # the token decides, later
    assert reason(rf.post("/sync/")) == REASON_NO_CSRF_COOKIE
    assert reason(rf.post("/sync/", HTTP_ORIGIN="http://testserver")) == REASON_NO_CSRF_COOKIE
    https = {"secure": True, "HTTP_REFERER": "https://evil.example/"}
    assert reason(rf.post("/sync/", **https)).startswith("Referer checking failed")
    assert reason(post("https://evil.example", secure=True)).startswith("Origin checking")
    settings.CSRF_USE_SESSIONS = True
    assert reason(rf.post("/sync/")) is None
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "csrf" not in m]
    assert reason(post("https://evil.example")) is None
    assert reason(rf.post("/sync/")) is None


def test_djangos_403_and_the_frameworks_401_come_before_the_views_400(rf, settings):
    """Without the door, CsrfViewMiddleware's process_view and the framework's
    authentication answer before the view reads a header it cannot take: so does the door.
    A host Django does not serve is Django's to answer (None: the door steps aside)."""
    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    from django_pdfpool.door import run_steps, through_door
    from django_pdfpool.exceptions import BadDigest
    from django_pdfpool.record import AdmissionRecord, PooledView

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    settings.ALLOWED_HOSTS = ["testserver"]
    bad = {"content-type": "application/pdf", "content-length": "1", "repr-digest": "sha-256=:eA:"}

    async def job(upload):
        return None

    def answer(request, view, func=job):
        return run_steps(through_door(request, AdmissionRecord.read(bad, view), view, func))

    plain = PooledView("file", job, "j", None)
    cookie = {"HTTP_COOKIE": f"csrftoken={'A' * 32}"}  # else CSRF's 403 (no cookie) comes first
    foreign = rf.post("/sync/", HTTP_ORIGIN="https://evil.example")
    assert answer(foreign, plain).status_code == 403
    assert isinstance(answer(foreign, plain, func=csrf_exempt(job)), BadDigest)
    locked = PooledView("file", job, "j", None, authenticate=lambda r, t: HttpResponse(status=401))
    assert answer(rf.post("/sync/", **cookie), locked).status_code == 401
    assert isinstance(answer(rf.post("/sync/", **cookie), plain), BadDigest)
    assert answer(rf.post("/sync/"), locked).status_code == 403
    elsewhere = rf.post("/sync/", HTTP_ORIGIN="https://evil.example", HTTP_HOST="evil.example")
    assert answer(elsewhere, plain) is None and answer(elsewhere, locked) is None


def csrf_failure_from_the_database(request, reason=""):
    """A project's CSRF_FAILURE_VIEW: it reads the database, and defers its rendering."""
    from django.contrib.auth.models import User
    from django.template import engines
    from django.template.response import TemplateResponse

    users = User.objects.count()
    template = engines["django"].from_string("refused ({{ users }} users): {{ reason }}")
    return TemplateResponse(request, template, {"users": users, "reason": reason}, status=403)


@pytest.mark.django_db(transaction=True)
def test_a_form_without_a_length_brings_no_csrf_token_django_reads(rf, settings):
    """A form sent chunked (no ``Content-Length``): Django parses none of a multipart one,
    and under WSGI (its stream is that length) none of any; its token is the header's. The
    door's answer is ``CsrfViewMiddleware``'s own, asked of the same request."""
    import io

    from django.core.handlers.asgi import ASGIRequest
    from django.core.handlers.wsgi import WSGIRequest
    from django.middleware.csrf import CsrfViewMiddleware, _mask_cipher_secret
    from django.test.client import FakePayload

    from django_pdfpool.door import csrf_refusal

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    secret = "A" * 32
    token = _mask_cipher_secret(secret)
    forms = {
        "application/x-www-form-urlencoded": f"csrfmiddlewaretoken={token}".encode(),
        "multipart/form-data; boundary=b": (
            f'--b\r\nContent-Disposition: form-data; name="csrfmiddlewaretoken"\r\n\r\n'
            f"{token}\r\n--b--\r\n"
        ).encode(),
    }

    def wsgi(content_type, body):
        environ = rf._base_environ(
            REQUEST_METHOD="POST", PATH_INFO="/sync/", CONTENT_TYPE=content_type,
            HTTP_TRANSFER_ENCODING="chunked", HTTP_COOKIE=f"csrftoken={secret}",
            **{"wsgi.input": FakePayload(body)},
        )  # fmt: skip
        environ.pop("CONTENT_LENGTH", None)
        return WSGIRequest(environ)

    def asgi(content_type, body):
        sent = [(b"content-type", content_type.encode()), (b"transfer-encoding", b"chunked")]
        sent += [(b"cookie", f"csrftoken={secret}".encode()), (b"host", b"testserver")]
        scope = {
            "type": "http", "method": "POST", "path": "/sync/", "query_string": b"",
            "headers": sent, "http_version": "1.1",
        }  # fmt: skip
        return ASGIRequest(scope, io.BytesIO(body))

    checked = 0
    for make in (wsgi, asgi):
        for content_type, body in forms.items():
            refused = csrf_refusal(make(content_type, body))
            django = CsrfViewMiddleware(lambda r: None).process_view(
                make(content_type, body), lambda r: None, (), {}
            )
            door = None if refused is None else refused()
            assert (door and door.status_code) == (django and django.status_code), (make, body)
            checked += django is not None
    assert checked == 3  # all but an urlencoded form under ASGI, whose body Django reads


@pytest.mark.django_db
def test_the_csrf_failure_view_runs_off_the_loop_and_is_rendered(rf, settings):
    """On an event loop the door runs the CSRF_FAILURE_VIEW as Django runs sync code (it
    may read the database there) and renders the response it defers, as Django would."""
    from django_pdfpool.door import arun_steps, through_door
    from django_pdfpool.record import AdmissionRecord, PooledView

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    settings.CSRF_FAILURE_VIEW = "tests.test_door.csrf_failure_from_the_database"

    async def job(upload):
        return None

    view = PooledView("file", job, "j", None)
    request = rf.post("/sync/", HTTP_ORIGIN="https://evil.example")
    record = AdmissionRecord.read({"content-type": "application/pdf", "content-length": "9"})
    answer = asyncio.run(arun_steps(through_door(request, record, view, view.job)))
    assert answer.status_code == 403
    assert answer.content.startswith(b"refused (0 users): Origin checking failed")


@pytest.mark.django_db(transaction=True)
def test_the_frameworks_probe_opens_no_connection_per_thread(rf):
    """The framework's authentication (DRF's TokenAuthentication reads the database) runs
    where Django runs sync code, not in pool threads whose connections nobody closes:
    probe after probe, at most one connection is opened."""
    from django.contrib.auth.models import User
    from django.db.backends.signals import connection_created
    from django.http import HttpResponse

    from django_pdfpool.door import arun_steps, through_door
    from django_pdfpool.record import AdmissionRecord, PooledView

    def authenticate(probe, throttle):
        User.objects.filter(username="nobody").exists()
        return HttpResponse(status=401)

    async def job(upload):
        return None

    view = PooledView("file", job, "j", None, authenticate=authenticate)
    record = AdmissionRecord.read({"content-type": "application/pdf", "content-length": "9"})
    opened = []

    def note(sender, connection, **kwargs):
        opened.append(connection)

    async def probes():
        steps = [
            arun_steps(through_door(rf.post("/sync/"), record, view, view.job)) for _ in range(4)
        ]
        return await asyncio.gather(*steps)

    connection_created.connect(note)
    try:
        for _ in range(3):  # each asyncio.run with its own pool of threads
            assert [a.status_code for a in asyncio.run(probes())] == [401] * 4
    finally:
        connection_created.disconnect(note)
    assert len(opened) <= 1


def test_the_frameworks_authentication_is_asked_of_a_copy_without_the_body(rf):
    """A framework's check that reads the form (a CSRF check does) reads an empty one: the
    real body stays unread for the door's decision and the view, and the answer it gave
    without the body is not taken (the framework answers with it); a check that raises is
    "may pass"; one that reads only the headers is the answer."""
    from django.http import HttpResponse

    from django_pdfpool.door import framework_refusal
    from django_pdfpool.record import PooledView

    seen = []

    def authenticate(probe, throttle):
        seen.append(dict(probe.POST))
        return HttpResponse(status=401)

    async def job(upload):
        return None

    request = rf.post("/sync/", {"a": "b"})
    answer = framework_refusal(
        request, PooledView("file", job, "j", None, authenticate=authenticate)
    )
    assert answer is None and seen == [{}]  # it read the form: its answer needs the body
    headers_only = PooledView(
        "file", job, "j", None, authenticate=lambda p, throttle: HttpResponse(status=401)
    )
    assert framework_refusal(request, headers_only).status_code == 401
    assert request.POST["a"] == "b"  # the real body, unread until now

    def broken(probe, throttle):
        raise RuntimeError("needs the body")

    assert (
        framework_refusal(request, PooledView("file", job, "j", None, authenticate=broken)) is None
    )


LOGIN_REQUIRED = "django.contrib.auth.middleware.LoginRequiredMiddleware"


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_an_anonymous_upload_to_a_view_that_needs_a_login_is_sent_to_log_in(
    pdfpool, settings, door
):
    """``LoginRequiredMiddleware``'s redirect comes before the view's 413: the door gives it
    from the headers (WSGI and ASGI), taking nothing."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOGIN_REQUIRED]
    pdfpool(MAX_UPLOAD_SIZE=64, DOOR=door)
    big = b"%PDF-" + b"x" * 100
    response = Client().post("/sync/", big, content_type="application/pdf")
    assert (response.status_code, response["Location"]) == (302, "/accounts/login/?next=/sync/")
    door_app = PdfPoolDoor(get_asgi_application())
    status, _, sent = asyncio.run(answer_of(door_app, asgi_post("/sync/", big), big))
    assert (status, sent[b"Location"]) == (302, b"/accounts/login/?next=/sync/")
    assert door_status()["held"] == []


def test_the_door_sends_to_log_in_only_a_user_it_knows_is_anonymous(rf, settings):
    """``request.user`` when set (WSGI), else anonymous only without a session cookie or a
    remote-user middleware; a view marked ``login_not_required`` is let through."""
    from django.contrib.auth.decorators import login_not_required
    from django.contrib.auth.models import AnonymousUser, User

    from django_pdfpool.door import Unknown, login_refusal, run_steps

    def view(request):
        return None

    assert run_steps(login_refusal(rf.post("/sync/"), view)) is None  # not installed
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOGIN_REQUIRED]
    assert run_steps(login_refusal(rf.post("/sync/"), view)).status_code == 302
    assert (
        run_steps(login_refusal(rf.post("/sync/"), login_not_required(lambda request: None)))
        is None
    )
    signed = rf.post("/sync/", HTTP_COOKIE=f"{settings.SESSION_COOKIE_NAME}=abc")
    assert run_steps(login_refusal(signed, view)) is Unknown.USER  # not read yet
    known = rf.post("/sync/", HTTP_COOKIE=f"{settings.SESSION_COOKIE_NAME}=abc")
    known.user = AnonymousUser()
    assert run_steps(login_refusal(known, view)).status_code == 302
    known.user = User(username="ann")
    assert run_steps(login_refusal(known, view)) is None
    remote = "django.contrib.auth.middleware.RemoteUserMiddleware"
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, remote]
    assert run_steps(login_refusal(rf.post("/sync/"), view)) is Unknown.USER


CSRF, ADMISSION = (
    "django.middleware.csrf.CsrfViewMiddleware",
    "django_pdfpool.middleware.AdmissionMiddleware",
)
SESSION, AUTH = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
)


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_the_login_redirect_and_the_csrf_403_come_in_the_order_of_middleware(
    pdfpool, settings, door
):
    """Django runs ``process_view`` hooks in ``MIDDLEWARE``'s order: CSRF's first checks the
    form's token (the body: 403 without it, the redirect with it); the login's first redirects
    even a cross-site POST. The door gives each answer Django gives, or lets the body in."""
    pdfpool(DOOR=door)
    token = "A" * 32
    client = Client(enforce_csrf_checks=True, HTTP_COOKIE=f"csrftoken={token}")
    pdf = b"%PDF- a small one"
    settings.MIDDLEWARE = [SESSION, CSRF, AUTH, LOGIN_REQUIRED, ADMISSION]
    unsigned = client.post("/sync/", pdf, content_type="application/pdf")
    assert unsigned.status_code == 403  # Django's CSRF page: "CSRF token missing"
    signed = client.post("/sync/", pdf, content_type="application/pdf", HTTP_X_CSRFTOKEN=token)
    assert (signed.status_code, signed["Location"]) == (302, "/accounts/login/?next=/sync/")
    settings.MIDDLEWARE = [SESSION, AUTH, LOGIN_REQUIRED, CSRF, ADMISSION]
    client = Client(enforce_csrf_checks=True, HTTP_COOKIE=f"csrftoken={token}")  # loads them
    foreign = client.post(
        "/sync/", pdf, content_type="application/pdf", HTTP_ORIGIN="https://x.example"
    )
    assert (foreign.status_code, foreign["Location"]) == (302, "/accounts/login/?next=/sync/")


class BearerUser:
    """A project's token middleware (django-oauth-toolkit's ``OAuth2TokenMiddleware``'s shape):
    ``request.user`` from an ``Authorization`` header, no session."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from django.contrib.auth.models import User

        if request.headers.get("Authorization") == "Bearer ann":
            request.user = User(pk=7, username="ann")
        return self.get_response(request)


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_user_a_middleware_signs_in_from_a_header_is_not_sent_to_log_in(pdfpool, settings, door):
    """Under ASGI the door decides before any middleware: an ``Authorization`` header is
    credentials not read yet, as for ``CALLER`` (the view's 413 here, door on or off)."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE[:-1],
        "tests.test_door.BearerUser",
        LOGIN_REQUIRED,
        ADMISSION,
    ]
    pdfpool(MAX_UPLOAD_SIZE=64, DOOR=door)
    big = b"%PDF-" + b"x" * 100
    request = asgi_post("/sync/", big, (b"authorization", b"Bearer ann"))
    assert asyncio.run(answer_of(PdfPoolDoor(get_asgi_application()), request, big))[0] == 413


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_signed_in_user_meets_the_login_check_on_an_async_stack(pdfpool, settings, door):
    """``AdmissionMiddleware`` in an async chain: the user (a session read from the
    database) is read off the event loop, not a 500 (SynchronousOnlyOperation)."""
    from asgiref.sync import async_to_sync
    from django.contrib.auth.models import User
    from django.test import AsyncClient

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOGIN_REQUIRED]
    pdfpool(MAX_UPLOAD_SIZE=64, DOOR=door)
    client = AsyncClient(raise_request_exception=False)
    async_to_sync(client.aforce_login)(User.objects.create_user("ann"))
    big = b"%PDF-" + b"x" * 100
    response = async_to_sync(client.post)("/sync/", big, content_type="application/pdf")
    assert response.status_code == 413  # the view's (the door's) answer: she is signed in


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_djangos_403_from_the_door_speaks_the_requests_language(pdfpool, settings, door):
    """LocaleMiddleware activates the client's language before any ``process_view``: CSRF's
    403 page is French for a French browser, from the door as from Django."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    locale = "django.middleware.locale.LocaleMiddleware"
    settings.MIDDLEWARE = [SESSION, locale, CSRF, *settings.MIDDLEWARE[1:]]
    pdfpool(DOOR=door)
    pdf = b"%PDF- a small one"
    foreign = [(b"origin", b"https://evil.example"), (b"accept-language", b"fr")]
    request = asgi_post("/sync/", pdf, *foreign)
    status, page, _ = asyncio.run(answer_of(PdfPoolDoor(get_asgi_application()), request, pdf))
    assert status == 403 and b"Interdit" in page  # "Forbidden"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_stale_session_cookie_is_sent_to_log_in_as_django_sends_it(pdfpool, settings, door):
    """A session cookie the database no longer knows is an anonymous user: Django's redirect,
    not the view's 413, door on or off (the door reads the session before it refuses)."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOGIN_REQUIRED]
    pdfpool(MAX_UPLOAD_SIZE=64, DOOR=door)
    big = b"%PDF-" + b"x" * 100
    stale = (b"cookie", f"{settings.SESSION_COOKIE_NAME}={'s' * 32}".encode())
    app = PdfPoolDoor(get_asgi_application())
    status, _, sent = asyncio.run(answer_of(app, asgi_post("/sync/", big, stale), big))
    assert (status, sent.get(b"Location")) == (302, b"/accounts/login/?next=/sync/")
    assert door_status()["held"] == []


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_an_anonymous_upload_past_a_csrf_check_is_sent_to_log_in_not_refused(
    pdfpool, settings, door
):
    """CSRF's check first, then the login's: an anonymous upload whose token passes is
    redirected, never the view's 413 (the door cannot read a form's token: Django answers)."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    settings.MIDDLEWARE = [SESSION, CSRF, AUTH, LOGIN_REQUIRED, ADMISSION]
    pdfpool(MAX_UPLOAD_SIZE=64, DOOR=door)
    token = "A" * 32
    big = b"%PDF-" + b"x" * 100
    signed = [(b"cookie", f"csrftoken={token}".encode()), (b"x-csrftoken", token.encode())]
    app = PdfPoolDoor(get_asgi_application())
    status, _, sent = asyncio.run(answer_of(app, asgi_post("/sync/", big, *signed), big))
    assert (status, sent.get(b"Location")) == (302, b"/accounts/login/?next=/sync/")


@pytest.mark.django_db
def test_a_framework_reading_the_session_is_asked_with_it_before_a_refusal(rf, settings):
    """A framework's session authentication (DRF's ``SessionAuthentication``) cannot tell from
    the headers, so the door decides first; before it refuses, it reads the session as
    Django's middleware would: a stale one gets the framework's 403, not the door's 413."""
    from django.http import HttpResponse

    from django_pdfpool.door import run_steps, through_door
    from django_pdfpool.exceptions import UploadTooLarge
    from django_pdfpool.record import AdmissionRecord, PooledView

    settings.PDFPOOL = {"MAX_UPLOAD_SIZE": 64}
    big = {"content-type": "application/pdf", "content-length": "100"}

    async def job(upload):
        return None

    def session_only(request, throttle):
        return None if request.user.is_authenticated else HttpResponse(status=403)

    view = PooledView("file", job, "j", None, authenticate=session_only)
    stale = rf.post("/sync/", HTTP_COOKIE=f"{settings.SESSION_COOKIE_NAME}={'s' * 32}")
    answer = run_steps(through_door(stale, AdmissionRecord.read(big, view), view, job))
    assert answer.status_code == 403
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "Session" not in m]
    unread = rf.post("/sync/", HTTP_COOKIE=f"{settings.SESSION_COOKIE_NAME}={'s' * 32}")
    answer = run_steps(through_door(unread, AdmissionRecord.read(big, view), view, job))
    assert isinstance(answer, UploadTooLarge)  # no session middleware: the pool's answer


def test_an_upload_that_holds_no_pdf_is_the_decorators_400_after_its_413():
    """``@pdf_pooled`` takes a PDF from a raw body or a form: an empty raw body, or a body of
    another type, is its 400 ``no_upload`` before the pool is asked (a closed one here), and
    after the 413 of a body over the limit; DRF's parsers may take any type, but read no
    body without a length."""
    from django_pdfpool.exceptions import NoUpload, UploadTooLarge

    closed = pressure(closed=True)
    for upload in (
        headers(content_length="10", content_type="text/plain"),
        headers(content_length="10"),
    ):
        assert isinstance(verdict(upload, closed, framework=False), NoUpload)
        assert isinstance(verdict(upload, closed), PoolClosed)  # DRF's route
    for upload in (
        headers(content_length="0", content_type="application/pdf"),
        headers(transfer_encoding="chunked", content_type="application/pdf"),
        headers(content_length="0", content_type="text/plain"),
    ):
        assert isinstance(verdict(upload, closed), NoUpload)  # DRF reads no body
    no_length = headers(transfer_encoding="chunked", content_type="application/pdf")
    assert isinstance(verdict(no_length, closed, framework=False), PoolClosed)  # it reads it
    over = headers(content_length=str(2 * MiB), content_type="text/plain")
    assert isinstance(verdict(over, closed, framework=False), UploadTooLarge)
    for upload in (
        headers(content_length="10", content_type="application/pdf"),
        headers(content_length="1000", content_type="multipart/form-data; boundary=b"),
    ):
        assert isinstance(verdict(upload, closed, framework=False), PoolClosed)
    for upload in (  # a form no file fits in never reaches the pool: Django answers (400)
        headers(content_length="10", content_type="multipart/form-data; boundary=b"),
        headers(content_length="10", content_type="multipart/form-data"),
    ):
        assert verdict(upload, closed, framework=False) is None


# Door on against door off: the same upload, the same answer (status, redirect, refusal code).
TOKEN = "A" * 32
STACKS = {
    "plain": [SESSION, AUTH, ADMISSION],
    "csrf": [SESSION, CSRF, AUTH, ADMISSION],
    "login": [SESSION, AUTH, LOGIN_REQUIRED, ADMISSION],
    "csrf-login": [SESSION, CSRF, AUTH, LOGIN_REQUIRED, ADMISSION],
    "login-csrf": [SESSION, AUTH, LOGIN_REQUIRED, CSRF, ADMISSION],
}


BODIES = {
    "raw": (MINE, "application/pdf"),
    "raw-over": (b"%PDF-" + b"z" * 5000, "application/pdf"),
    "raw-empty": (b"", "application/pdf"),
    "form": (form(MINE), FORM_TYPE),
    "form-other-field": (form(MINE, "other"), FORM_TYPE),
    "form-over": (form(b"%PDF-" + b"z" * 5000), FORM_TYPE),
    "text": (b"hello", "text/plain"),
    "untyped": (MINE, None),
}
DIGESTS = {
    "none": [],
    "mine": [(b"repr-digest", format_digest(sha(MINE)).encode())],
    "theirs": [(b"repr-digest", format_digest(sha(THEIRS)).encode())],
    "unreadable": [(b"repr-digest", b"sha-256=:!!:")],
    "twice": [(b"repr-digest", format_digest(sha(MINE)).encode())] * 2,
}
COOKIES = {
    "none": [],
    "csrf": [(b"cookie", f"csrftoken={TOKEN}".encode())],
    "stale-session": [(b"cookie", b"sessionid=" + b"s" * 32)],
    "both": [(b"cookie", f"csrftoken={TOKEN}; sessionid={'s' * 32}".encode())],
}
EXTRAS = {
    "none": [],
    "token": [(b"x-csrftoken", TOKEN.encode())],
    "cross-site": [(b"origin", b"https://evil.example")],
    "same-site": [(b"origin", b"http://testserver"), (b"x-csrftoken", TOKEN.encode())],
    "authorization": [(b"authorization", b"Token x")],
}
GRID = list(itertools.product(STACKS, BODIES, DIGESTS, COOKIES, EXTRAS, ("length", "chunked")))
random.Random(7).shuffle(GRID)
FOUND = [  # cases that once differed
    ("login-csrf", "untyped", "twice", "stale-session", "token", "chunked"),
    ("csrf", "raw-empty", "unreadable", "both", "authorization", "chunked"),
    ("plain", "raw-empty", "mine", "both", "same-site", "length"),
    ("login", "raw-over", "none", "csrf", "authorization", "length"),
    ("plain", "raw-over", "twice", "stale-session", "same-site", "chunked"),
    ("plain", "raw", "twice", "none", "same-site", "chunked"),
    ("login", "raw-over", "theirs", "stale-session", "same-site", "chunked"),
    ("plain", "raw-over", "mine", "none", "token", "chunked"),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("full", [False, True], ids=["idle", "full"])
@pytest.mark.parametrize("case", FOUND + GRID[:60], ids="-".join)
def test_the_door_answers_as_django_and_the_pool_answer_with_the_door_off(
    pdfpool, settings, case, full
):
    """Through ``PdfPoolDoor`` under each middleware order, for bodies, digests, cookies and
    CSRF headers of every kind, sized or chunked, with the pool idle or full (its one slot
    held for another upload): the door's answer is the one its absence gives."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    stack, kind, digest, cookie, extra, length = case
    body, content_type = BODIES[kind]
    sent = [(b"content-type", content_type.encode())] if content_type else []
    sent += DIGESTS[digest] + COOKIES[cookie] + EXTRAS[extra]
    if length == "length":
        sent.append((b"content-length", b"%d" % len(body)))
    else:  # an HTTP/1.1 body framed by neither is empty: chunks, as a server passes them on
        sent.append((b"transfer-encoding", b"chunked"))
    request = {**asgi_post("/held/async/", body), "client": ("10.1.2.3", 5000)}
    request["headers"] = [(b"host", b"testserver"), *sent]
    answers = []
    for door in (False, True):
        pdfpool(MAX_UPLOAD_SIZE=4096, DOOR=door, SLOTS=1, QUEUE=0)
        settings.MIDDLEWARE = STACKS["plain"]  # theirs is let in
        HELD.reset()
        with held_requests(1) as threads:
            if full:
                theirs = asgi_post("/held/async/", THEIRS)
                app = PdfPoolDoor(get_asgi_application())
                threads.submit(asyncio.run, answer_of(app, theirs, THEIRS))
                wait_until(lambda: get_pool().running() == 1)
            else:
                HELD.release.set()
            settings.MIDDLEWARE = STACKS[stack]
            status, page, headers = asyncio.run(
                answer_of(PdfPoolDoor(get_asgi_application()), request, body)
            )
        code = json.loads(page).get("code") if page.startswith(b"{") else None
        answers.append((status, headers.get(b"Location"), code))
        wait_until(lambda: get_pool().running() == 0)
    assert answers[1] == answers[0]


# Door on against door off, every header: a refusal from the headers is answered as the view's.
WHO = ["signed-in", "anonymous", "stale-session"]
REFUSALS = ["busy", "caller_busy", "closed", "too_large"]
EVERY = {  # the stacks, and one with every header Django's middleware may add
    **STACKS,
    "full": [
        "django.middleware.security.SecurityMiddleware", SESSION,
        "django.middleware.locale.LocaleMiddleware", "django.middleware.common.CommonMiddleware",
        CSRF, AUTH, "django.contrib.messages.middleware.MessageMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware", ADMISSION,
    ],
}  # fmt: skip


def answer_headers(pdfpool, settings, server, stack, who, refusal, door):
    """The status and headers (but ``Connection``) of a refusal through ``PdfPoolDoor`` (or
    Django's WSGI handler) with ``DOOR=door``; ``Retry-After`` only said to be there (its figure
    is the pool's estimate)."""
    from django.contrib.auth.models import User
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor

    pdfpool(MAX_UPLOAD_SIZE=4096, DOOR=door, SLOTS=1, QUEUE=0)
    settings.MIDDLEWARE = STACKS["plain"]  # theirs is let in
    key = {"anonymous": None, "stale-session": "s" * 32}.get(who, "")
    if who == "signed-in":
        client = Client()
        client.force_login(User.objects.get_or_create(username="ann")[0])
        key = client.cookies[settings.SESSION_COOKIE_NAME].value
    session = [] if key is None else [f"{settings.SESSION_COOKIE_NAME}={key}"]
    cookie = [(b"cookie", "; ".join([*session, f"csrftoken={TOKEN}"]).encode())]
    body = b"%PDF-" + b"z" * 5000 if refusal == "too_large" else MINE
    digest = (b"repr-digest", format_digest(sha(body)).encode())
    sent = [digest, (b"x-csrftoken", TOKEN.encode()), (b"accept-language", b"fr")]
    request = asgi_post("/held/async/", body, *cookie, *sent)
    request["client"] = ("10.1.2.3", 5000)
    HELD.reset()
    with held_requests(1) as threads:
        if refusal in ("busy", "caller_busy"):  # the one slot held, by this caller or another
            mine = refusal == "caller_busy"
            theirs = asgi_post("/held/async/", THEIRS, *(cookie if mine else []))
            theirs["client"] = ("10.1.2.3" if mine else "10.9.9.9", 5000)
            app = PdfPoolDoor(get_asgi_application())
            threads.submit(asyncio.run, answer_of(app, theirs, THEIRS))
            wait_until(lambda: get_pool().running() == 1)
        elif refusal == "closed":
            get_pool().close()
        settings.MIDDLEWARE = EVERY[stack]
        if server == "asgi":
            app = PdfPoolDoor(get_asgi_application())
            status, _, sent = asyncio.run(answer_of(app, request, body))
        else:
            wsgi = Client(enforce_csrf_checks=True, HTTP_COOKIE=cookie[0][1].decode())
            meta = {f"HTTP_{k.decode().upper().replace('-', '_')}": v.decode() for k, v in sent}
            meta["REMOTE_ADDR"] = "10.1.2.3"
            response = wsgi.post("/held/sync/", body, content_type="application/pdf", **meta)
            status = response.status_code
            sent = {name.encode(): value.encode() for name, value in response.items()}
            for morsel in response.cookies.values():
                sent[b"set-cookie"] = morsel.output(header="").strip().encode()
    wait_until(lambda: get_pool().running() == 0)
    found = {name.decode().lower(): value.decode() for name, value in sent.items()}
    found.pop("connection", None)  # the door's own: its unread body never keeps it,
    found.pop("content-length", None)  # and its end is said before the close
    if "retry-after" in found:
        found["retry-after"] = "..."
    return status, found


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("refusal", REFUSALS)
@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("stack", ["plain", "login", "full"])
@pytest.mark.parametrize("server", ["asgi", "wsgi"])
def test_the_doors_refusal_has_every_header_of_the_answer_with_the_door_off(
    pdfpool, settings, server, stack, who, refusal
):
    """``Vary: Cookie`` (the caller read the session) and the stale cookie's removal included:
    a cache or a browser sees the door's refusal as the view's."""
    said = (pdfpool, settings, server, stack, who, refusal)
    off, on = (answer_headers(*said, door) for door in (False, True))
    assert on == off
