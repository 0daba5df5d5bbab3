"""``middleware.TimedStream``: a WSGI body read against its ticket's deadline. Each read
(``read`` and ``readline`` alike) counts its bytes, and the bytes earn time
(``BODY_MIN_RATE``): a body that keeps coming may outlast ``BODY_TIMEOUT``; one that
stops gets 408 and its place back."""

from __future__ import annotations

import contextlib
import io
import math
import os
import threading
from functools import partial

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from django_pdfpool import get_pool
from django_pdfpool.door import ARRIVING, Arrivals, Terms
from django_pdfpool.exceptions import (
    BodyTimeout,
)
from django_pdfpool.middleware import TimedStream
from django_pdfpool.record import format_digest
from django_pdfpool.uploads import STAGING_CHUNK
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD
from tests.support import pdfs
from tests.support.door import JSON, SOON, MiB, headers, pdfs_upload, post, pressure, sha, verdict

TERMS = Terms(
    max_upload_size=10_000, budget=1, budget_bytes=10_000, body_timeout=0.5, body_min_rate=100
)


def test_every_read_counts_its_bytes_and_the_bytes_earn_time():
    arrivals = Arrivals()
    ticket = arrivals.place(1, "ip:10.8.0.1", None)
    assert ticket is not None
    stream = TimedStream(io.BytesIO(b"line\n" + b"x" * 995), ticket, TERMS)
    assert stream.readline() == b"line\n"
    assert stream.read(595) == b"x" * 595
    assert ticket.received == 600  # 6 s earned at 100 bytes a second
    ticket.started -= 2.0  # two seconds on, past BODY_TIMEOUT (0.5 s) but not past 6.5 s
    assert stream.read() == b"x" * 400  # still in time: the bytes so far earned it
    assert ticket.received == 1000 and not ticket.released


def test_a_body_past_its_deadline_gets_408_and_gives_its_place_back():
    arrivals = Arrivals()
    ticket = arrivals.place(1, "ip:10.8.0.2", None)
    assert ticket is not None
    stream = TimedStream(io.BytesIO(b"x" * 1000), ticket, TERMS)
    assert stream.read(10) == b"x" * 10  # 0.1 s earned
    ticket.started -= 1.0  # past 0.5 + 0.1 s
    with pytest.raises(BodyTimeout):
        stream.readline()
    assert ticket.released and arrivals.timed_out == 1
    assert arrivals.place(1, "ip:10.8.0.3", None) is not None  # the place is free again


pytest_plugins = ["tests.support.redis_fixtures"]


NO_BUDGET = Terms(max_upload_size=MiB, budget=0, budget_bytes=0, body_timeout=20, body_min_rate=500)


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


@contextlib.contextmanager
def opened_at_exit(settings: dict):
    """The gated view's gate, opened when the block ends, failed or not: the request held
    on it must end before ``held_requests`` waits for it."""
    from django.conf import settings as django_settings

    gate = os.path.join(django_settings.FILE_UPLOAD_TEMP_DIR, "open")
    try:
        yield gate
    finally:
        open(gate, "w").close()


def digest_of(data: bytes) -> dict:
    return {"HTTP_PDF_DIGEST": format_digest(sha(data))}


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


class SlowBody(io.RawIOBase):
    """A body that sends ``data`` one byte per read, ``pause`` seconds apart: a trickle."""

    def __init__(self, data: bytes, pause: float) -> None:
        self.data, self.pause = data, pause

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.data:
            return 0
        import time

        time.sleep(self.pause)
        buffer[0], self.data = self.data[0], self.data[1:]
        return 1


def trickled_form(fields: dict) -> dict:
    """A WSGI environ whose multipart body of ``fields`` comes 50 bytes a second."""
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    body = encode_multipart(BOUNDARY, fields)
    return {
        "wsgi.input": SlowBody(body, 0.02),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": MULTIPART_CONTENT,
        **JSON,
    }


def project_refusal(request, exception):
    from django.http import HttpResponse

    return HttpResponse(f"refused: {type(exception).__name__} {exception.code}", status=499)


def db_refusal(request, exception):
    """A refusal view that reads the database, as a project's may."""
    from django.contrib.auth.models import User
    from django.http import HttpResponse

    return HttpResponse(f"{exception.code}: {User.objects.count()} users", status=499)


def test_a_declared_size_over_the_limit_gets_413_unread(pdfpool):
    """Under WSGI the answer carries no hop-by-hop header (PEP 3333; wsgiref 500s on one):
    whether to close is the server's."""
    pdfpool(MAX_UPLOAD_SIZE=MiB)
    response = unread_post("/sync/", 200 * MiB)
    assert response.status_code == 413 and response.json()["error"] == "too_large"
    assert not response.has_header("Connection")


CSRF_NO_COMMON = [  # nothing asks the host before CsrfViewMiddleware's Origin check
    "django.middleware.csrf.CsrfViewMiddleware",
    "django_pdfpool.middleware.AdmissionMiddleware",
]


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_host_django_does_not_serve_gets_djangos_answer(pdfpool, settings, door):
    """The door steps aside: Django's answer (CommonMiddleware's 400 where installed, here
    CsrfViewMiddleware's 403, the Origin not the host's), not the door's 413."""
    settings.MIDDLEWARE, settings.ALLOWED_HOSTS = CSRF_NO_COMMON, ["testserver"]
    pdfpool(MAX_UPLOAD_SIZE=MiB, DOOR=door)
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    evil = {"HTTP_HOST": "evil.example", "HTTP_ORIGIN": "https://evil.example"}
    environ = {"wsgi.input": UnreadBody(), "CONTENT_LENGTH": str(200 * MiB), **JSON, **evil}
    response = client.generic("POST", "/sync/", content_type="application/pdf", **environ)
    assert response.status_code == 403 and b"CSRF" in response.content


def test_a_closed_pool_gets_503_unread_and_other_views_pass(pdfpool):
    pdfpool()
    get_pool().close()
    response = unread_post("/sync/", 1000)
    assert response.status_code == 503 and response.json()["error"] == "closed"
    assert Client().post("/plain/", {"x": "1"}).status_code == 200  # not pooled: untouched


def test_a_redis_pool_refusing_while_redis_fails_gets_503_unread(pdfpool, namespace):
    """FALLBACK "refuse" while Redis fails: the pool refuses every new call (503
    ``unavailable``), so the door gives that answer from the headers, not after the body."""
    from tests.support.redis_server import free_port

    pdfpool(REDIS={"URL": f"redis://127.0.0.1:{free_port()}/0", "NAMESPACE": namespace})
    pool = get_pool()
    wait_until(lambda: pool.pressure() is not None and pool.mode == "refusing")
    response = unread_post("/sync/", 1000)
    assert response.status_code == 503 and response.json()["error"] == "unavailable"
    assert int(response["Retry-After"]) >= 1
    assert pool.snapshot().counters.refused_unavailable == 1


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
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 0})
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


def test_a_callers_next_upload_waits_for_its_body_arriving_then_joins(pdfpool):
    """One body per caller arrives at a time, but a caller's second upload is not shed
    for it: it waits, holding nothing, until the first body reaches the pool, then gets
    the pool's answer (here: both join the job in flight). Nothing counts as shed."""
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 4})
    data, gate, shed = b"%PDF- gated twins", threading.Event(), ARRIVING.shed
    with held_requests(3) as threads, opened_at_exit(settings) as opened:
        first = threads.submit(post, "/gated/", data, "10.4.0.1")
        wait_until(lambda: get_pool().running() == 1)
        arriving = threads.submit(gated_post, "/gated/", data, gate, "10.4.0.2")
        wait_until(lambda: ARRIVING.own("ip:10.4.0.0/24") is not None)
        second = threads.submit(post, "/gated/", data, "10.4.0.2")
        own = ARRIVING.own("ip:10.4.0.0/24")
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
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR={"BODY_TIMEOUT": 1.0})
    gate, shed = threading.Event(), ARRIVING.shed
    with held_requests(2) as threads, opened_at_exit(settings) as opened:
        first = threads.submit(post, "/gated/", b"%PDF- running", "10.5.0.1")
        wait_until(lambda: get_pool().running() == 1)
        silent = threads.submit(gated_post, "/gated/", b"%PDF- silent", gate, "10.5.0.2")
        wait_until(lambda: ARRIVING.own("ip:10.5.0.0/24") is not None)
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
    settings = pdfpool(SLOTS=1, QUEUE=0, DOOR={"DIGESTS": False})
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


def test_a_trickling_body_under_wsgi_gets_408_and_gives_its_place_back(pdfpool):
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BODY_TIMEOUT": 0.5, "BODY_MIN_RATE": 1000})
    timed_out = ARRIVING.timed_out
    environ = {
        "wsgi.input": SlowBody(b"x" * 10_000, 0.05),
        "CONTENT_LENGTH": "10000",
        "CONTENT_TYPE": "application/pdf",
        **JSON,
    }
    response = Client(REMOTE_ADDR="10.6.0.1").generic("POST", "/sync/", **environ)
    assert response.status_code == 408 and response.json()["error"] == "body_timeout"
    assert ARRIVING.count == 0 and ARRIVING.timed_out == timed_out + 1
    assert get_pool().snapshot().counters.started == 0


def test_a_body_past_its_deadline_while_csrf_reads_the_form_is_408_not_500(pdfpool, settings):
    """Whoever reads the body (here CsrfViewMiddleware, for its token), its 408 is the answer."""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE]
    settings.MIDDLEWARE.insert(2, "django.middleware.csrf.CsrfViewMiddleware")
    pdfpool(DOOR={"BODY_TIMEOUT": 0.5, "BODY_MIN_RATE": 1000})
    token = "A" * 32
    client = Client(enforce_csrf_checks=True, raise_request_exception=False, REMOTE_ADDR="10.6.0.2")
    client.cookies["csrftoken"] = token
    fields = {"csrfmiddlewaretoken": token, "file": pdfs_upload(b"%PDF- " + b"x" * 200)}
    response = client.generic("POST", "/sync/", **trickled_form(fields))
    assert response.status_code == 408 and response.json()["error"] == "body_timeout"


def test_a_budget_entry_shed_mid_body_is_answered_by_the_views_own_answer(pdfpool):
    """SLOTS 1, QUEUE 0, a job running: an upload let in on the budget, past its bytes, gets
    the pool's 503 through the view's ``answer=`` (as the pool's own 503 would be)."""
    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 1, "BUDGET_BYTES": 1000})
    HELD.reset()
    with held_requests(1) as threads:
        first = threads.submit(post, "/own-answers/", b"%PDF- held", "10.6.1.1")
        wait_until(lambda: get_pool().running() == 1)
        shed = post("/own-answers/", b"%PDF- " + b"y" * 5000, "10.6.2.1")
        HELD.release.set()
        assert first.result(SOON).status_code == 200
    assert shed.status_code == 418 and shed.json()["mine"] == "busy"


def test_a_lowercase_post_and_a_chunked_form_meet_the_door(pdfpool):
    pdfpool(MAX_UPLOAD_SIZE=MiB)
    lower = unread_post("/sync/", 200 * MiB, REQUEST_METHOD="post")
    assert lower.status_code == 413
    chunked = unread_post("/sync/", 10, HTTP_TRANSFER_ENCODING="chunked")
    assert chunked.status_code == 411 and chunked.json()["error"] == "length_required"


def test_a_raw_pdf_body_is_extracted(pdfpool):
    """Read whole, a chunk at a time: a body of several chunks is staged as it came."""
    pdfpool()
    data = pdfs.padded("raw body", 3 * STAGING_CHUNK)
    response = Client().post(
        "/sync/",
        data,
        content_type="application/pdf",
        **JSON,
        HTTP_REPR_DIGEST=format_digest(sha(data)),
    )
    assert response.status_code == 200, response.content
    pdf = response.json()["pdf"]
    assert "raw body" in pdf["text"] and pdf["sha256"] == sha(data)


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
    assert os.listdir(pdfpool.staged) == []


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
    assert os.listdir(pdfpool.staged) == []


def test_the_door_off_reads_every_body(pdfpool):
    pdfpool(DOOR=False)
    get_pool().close()
    with pytest.raises(AssertionError, match="read the body"):
        unread_post("/sync/", 1000)


def test_refusal_view_answers_for_the_decorator_the_middleware_and_the_door(pdfpool):
    pdfpool(REFUSAL_VIEW="tests.test_middleware.project_refusal", MAX_UPLOAD_SIZE=MiB)
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


def test_the_door_answers_on_the_event_loop_only_with_the_librarys_own_answers(pdfpool):
    """A project's refusal view or ``answer=`` may render templates or read the database:
    the ASGI door runs those in a thread, and only those (bench_load: a thread hop per
    refusal cost the example's API 35 ms at p99 in a burst)."""
    from django_pdfpool.responses import answers_quickly, error_answer, html_answer, json_answer

    pdfpool()
    assert answers_quickly(None) and answers_quickly(json_answer) and answers_quickly(html_answer)
    assert answers_quickly(error_answer)
    assert not answers_quickly(lambda request, status, code, message, retry_after: None)
    pdfpool(REFUSAL_VIEW="tests.test_middleware.project_refusal")
    assert not answers_quickly(None) and answers_quickly(json_answer)


@pytest.mark.django_db(transaction=True)
def test_a_refusal_view_may_read_the_database_from_async_views_too(pdfpool):
    """For an async view (or the pool's refusal of a sync one, met on an event loop) the
    project's refusal view runs in a worker thread, where the ORM may be used."""
    pdfpool(REFUSAL_VIEW="tests.test_middleware.db_refusal", DOOR=False)  # the pool answers
    no_upload = Client().post("/async/", {"x": "1"})  # the async view's own check
    assert (no_upload.status_code, no_upload.content) == (499, b"no_upload: 0 users")
    get_pool().close()  # the pool refuses (inside async_to_sync for the sync view)
    for url in ("/sync/", "/async/"):
        field = "document" if url == "/async/" else "file"
        closed = Client().post(url, {field: pdfs_upload(pdfs.simple(["x"]))})
        assert (closed.status_code, closed.content) == (499, b"closed: 0 users"), url


def test_the_metrics_count_the_bodies_held_what_was_shed_and_what_timed_out(pdfpool):
    from django_pdfpool.door import ARRIVING
    from django_pdfpool.status.metrics import Reading, render

    pdfpool()
    upload = headers(content_length="10")
    shed, timed_out = ARRIVING.shed, ARRIVING.timed_out
    place = verdict(upload, pressure(free=1), ARRIVING, who="ip:metrics-1")
    budget = verdict(upload, pressure(free=0), ARRIVING, who="ip:metrics-2")
    verdict(upload, pressure(free=0), ARRIVING, who="ip:metrics-3", terms=NO_BUDGET)
    ARRIVING.count_shed()  # what the door's entry counts for that shed
    text = render(Reading.now(get_pool().snapshot(), 30.0, 1))
    assert 'pdfpool_door_held{kind="place"} 1' in text
    assert 'pdfpool_door_held{kind="budget"} 1' in text
    assert f"pdfpool_door_shed_total {shed + 1}" in text
    place.release(timed_out=True)
    budget.release()
    text = render(Reading.now(get_pool().snapshot(), 30.0, 1))
    assert 'pdfpool_door_held{kind="place"} 0' in text
    assert f"pdfpool_door_timed_out_total {timed_out + 1}" in text


def template_refusal(request, exception):
    """A project's REFUSAL_VIEW rendering a template, as views do (Django renders it)."""
    from django.template import engines
    from django.template.response import TemplateResponse

    page = engines["django"].from_string("refused: {{ code }}")
    return TemplateResponse(request, page, {"code": exception.code}, status=exception.status)


@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_refusal_views_template_response_is_rendered(pdfpool, door):
    """Django renders a view's template response, not a middleware's: the door renders its
    own, sync and async, as the refusal a view answers is rendered."""
    from django.test import AsyncClient

    pdfpool(MAX_UPLOAD_SIZE=1024, DOOR=door, REFUSAL_VIEW="tests.test_middleware.template_refusal")
    big = b"%PDF-" + b"x" * 2048
    response = Client().post("/sync/", big, content_type="application/pdf")
    assert (response.status_code, response.content) == (413, b"refused: too_large")
    response = async_to_sync(AsyncClient().post)("/sync/", big, content_type="application/pdf")
    assert (response.status_code, response.content) == (413, b"refused: too_large")


@pytest.mark.parametrize("url", ["/stored/sync/", "/stored/async/"])
def test_an_upload_too_large_for_extract_pooled_in_a_view_is_its_413(pdfpool, url):
    """``extract_pooled`` in a view of one's own raises ``UploadTooLarge`` as the pool's
    refusals: the middleware answers it as the decorator would, not with a server error."""
    pdfpool(MAX_UPLOAD_SIZE=1024)
    response = post(url, pdfs.simple(["x" * 2000]) + b"%" * 2000)
    assert response.status_code == 413 and response.json()["error"] == "too_large"


@pytest.mark.parametrize("server", ["asgi", "wsgi"])
def test_a_body_shed_mid_way_is_told_the_pools_retry_after_for_its_caller(pdfpool, server):
    """A caller back as told after a refusal is told twice as long (the pool's rule): a body
    let in on the budget and shed mid-way (``PdfPoolDoor``, ``AdmissionMiddleware``) is told
    that too, as from the headers."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor
    from tests.support.door import MINE, THEIRS, answer_of, asgi_post

    pdfpool(SLOTS=1, QUEUE=0, DOOR={"BUDGET": 2, "BUDGET_BYTES": 200})
    app, caller, pool = PdfPoolDoor(get_asgi_application()), "ip:10.9.9.9", get_pool()

    def upload(body: bytes, sent: bytes) -> tuple[int, str | None]:
        if server == "wsgi":
            client = Client(REMOTE_ADDR="10.9.9.9")
            answer = client.generic("POST", "/held/sync/", body, "application/pdf")
            return answer.status_code, answer.get("Retry-After")
        scope = {**asgi_post("/held/async/", body), "client": ("10.9.9.9", 5000)}
        status, _, headers = async_to_sync(answer_of)(app, scope, sent)
        return status, headers.get(b"Retry-After", b"").decode() or None

    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(async_to_sync(answer_of), app, asgi_post("/held/async/", THEIRS), THEIRS)
        wait_until(lambda: pool.running() == 1)
        other = b"%PDF-" + b"z" * 500  # of a size no job in flight has: refused from the headers
        assert upload(other, b"")[0] == 503
        alone, mine = partial(pool.pressure), partial(pool.pressure, None, caller)
        wait_until(lambda: mine().retry_after > 1.5 * alone().retry_after)  # back as told
        told = mine().retry_after  # twice as long
        status, retry_after = upload(MINE, MINE)  # it may join: let in, then past BUDGET_BYTES
        after = mine().retry_after
    assert status == 503 and retry_after is not None
    assert math.ceil(told) <= int(retry_after) <= math.ceil(after)


@pytest.mark.parametrize(
    "content_type",
    [
        "Multipart/form-data; boundary=b",  # Django's parser reads the raw header: 400
        "multipart/form-data; boundary=" + "b" * 202,  # a boundary Django will not take
        'multipart/form-data; boundary="b "',
        "multipart/form-data; boundary=b; name=\xe9",  # not ASCII
    ],
)
@pytest.mark.parametrize("door", [False, True], ids=["door-off", "door-on"])
def test_a_form_whose_headers_django_refuses_gets_djangos_400_door_or_not(
    pdfpool, door, content_type
):
    """A form Django's multipart parser refuses from its ``Content-Type`` alone is Django's
    400, before the body, with the door as without it (not the pool's 503)."""
    pdfpool(DOOR=door)
    get_pool().close()
    environ = {"wsgi.input": UnreadBody(), "CONTENT_LENGTH": "1000", "CONTENT_TYPE": content_type}
    response = Client(raise_request_exception=False).generic("POST", "/sync/", **environ, **JSON)
    assert response.status_code == 400 and b"Bad Request" in response.content
