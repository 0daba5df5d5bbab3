"""The door: admission from a request's headers, before its body is read (docs/door.md).
Its rules one by one, then each decision through Django's test client (WSGI), with a
body that fails the test if anything reads it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import threading

import pytest
from django.test import Client

from django_pdfpool import get_pool
from django_pdfpool.admission.ledger import Ledger
from django_pdfpool.admission.local import Pool
from django_pdfpool.admission.snapshot import Pressure
from django_pdfpool.door.headers import UploadHeaders, format_digest, parse_digest
from django_pdfpool.door.rules import MULTIPART_SLACK, Arrivals, Ticket, decide
from django_pdfpool.exceptions import BadDigest, PoolBusy, PoolClosed, UploadTooLarge
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


def pressure(closed=False, free=1, in_flight=False, retry_after=2.5) -> Pressure:
    return Pressure(closed=closed, free=free, in_flight=in_flight, retry_after=retry_after)


def verdict(upload, state, arrivals=None, key=None, limit=MiB, shed=True):
    arrivals = arrivals if arrivals is not None else Arrivals()
    return decide(upload, key, state, arrivals, max_upload_size=limit, shed_undeclared=shed)


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
    form = headers(
        transfer_encoding="chunked",
        content_type="multipart/form-data; boundary=x",
        expect="100-continue",
        pdf_digest=format_digest(digest),
    )
    assert (form.declared_size, form.chunked, form.expects_continue, form.digest) == (
        None,
        True,
        True,
        digest,
    )
    # a raw body's digest is in Repr-Digest or Content-Digest; Pdf-Digest is the form's
    assert headers(content_type="application/pdf", pdf_digest=format_digest(digest)).digest is None
    with pytest.raises(BadDigest):
        headers(
            content_type="application/pdf",
            repr_digest=format_digest(digest),
            content_digest=format_digest(sha(b"y")),
        )


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


def test_a_full_pool_refuses_with_its_retry_estimate_unless_the_upload_joins():
    full = pressure(free=0, retry_after=7.0)
    busy = verdict(headers(content_length="10"), full)
    assert isinstance(busy, PoolBusy) and busy.retry_after == 7.0
    assert verdict(headers(content_length="10"), pressure(free=0, in_flight=True)) is None
    # shedding off: an undeclared upload goes in (it may join); a declared one that
    # cannot join is refused either way
    assert verdict(headers(content_length="10"), full, shed=False) is None
    declared = headers(content_length="10", pdf_digest=format_digest(sha(b"x")))
    assert isinstance(verdict(declared, full, key="k", shed=False), PoolBusy)


def test_a_burst_is_let_in_only_as_far_as_there_are_places():
    arrivals = Arrivals()
    upload = headers(content_length="10")
    verdicts = [verdict(upload, pressure(free=6), arrivals) for _ in range(200)]
    tickets = [v for v in verdicts if isinstance(v, Ticket)]
    assert len(tickets) == 6 and arrivals.count == 6
    assert all(isinstance(v, PoolBusy) for v in verdicts[6:])
    tickets[0].release()
    tickets[0].release()  # idempotent
    assert arrivals.count == 5
    assert isinstance(verdict(upload, pressure(free=6), arrivals), Ticket)


def test_an_upload_right_behind_an_identical_arriving_one_joins_it():
    arrivals = Arrivals()
    declared = headers(content_length="10", pdf_digest=format_digest(sha(b"x")))
    first = verdict(declared, pressure(free=1), arrivals, key="job:x")
    assert isinstance(first, Ticket)
    assert verdict(declared, pressure(free=1), arrivals, key="job:x") is None  # joins it
    assert isinstance(verdict(declared, pressure(free=1), arrivals, key="job:y"), PoolBusy)
    first.release()
    assert not arrivals.carries("job:x")


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
    pdfpool(SLOTS=2, QUEUE=0, SHED_UNDECLARED=False)
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

    def __init__(self) -> None:
        self.touched = threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.touched.set()
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
    pdfpool(MAX_UPLOAD_SIZE=MiB)
    response = unread_post("/sync/", 200 * MiB)
    assert response.status_code == 413 and response.json()["error"] == "too_large"
    assert response["Connection"] == "close"


def test_a_closed_pool_gets_503_unread_and_other_views_pass(pdfpool):
    pdfpool()
    get_pool().close()
    response = unread_post("/sync/", 1000)
    assert response.status_code == 503 and response.json()["error"] == "closed"
    assert Client().post("/plain/", {"x": "1"}).status_code == 200  # not pooled: untouched


def test_a_full_pool_refuses_unread_and_a_declared_joiner_goes_in(pdfpool, tmp_path):
    settings = pdfpool(SLOTS=1, QUEUE=0)
    data = b"%PDF- gated"
    gate = os.path.join(settings["TEMP_DIR"], "open")
    with held_requests(2) as threads:
        first = threads.submit(post, "/gated/", data, "10.1.0.1")
        wait_until(lambda: get_pool().running() == 1)
        busy = unread_post("/gated/", 1000, "10.1.0.2")
        assert busy.status_code == 503 and busy.json()["error"] == "busy"
        assert int(busy["Retry-After"]) >= 1 and busy.json()["retry_after"] >= 1
        joiner = threads.submit(
            post, "/gated/", data, "10.1.0.3", HTTP_PDF_DIGEST=format_digest(sha(data))
        )
        wait_until(lambda: get_pool().waiting(get_pool().snapshot().jobs[0].key) == 1)
        open(gate, "w").close()
        answers = [first.result(SOON), joiner.result(SOON)]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json()
    assert get_pool().snapshot().counters.started == 1


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
    from django_pdfpool.responses import answers_quickly, negotiated_answer

    pdfpool()
    assert answers_quickly(None) and answers_quickly(json_answer) and answers_quickly(html_answer)
    assert answers_quickly(negotiated_answer)
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
