"""The door's answers under every server (uvicorn, hypercorn, granian serving ``PdfPoolDoor``;
gunicorn sync and gthread and runserver serving the WSGI project, where
``AdmissionMiddleware`` is the door), spoken to over raw sockets: what is answered before
the body is answered with no body byte sent."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from django_pdfpool.record import format_digest
from tests.e2e.test_door_servers import answered, connect, form_head, head, port_of, read_answer
from tests.support import pdfs
from tests.support.door import form, sha
from tests.support.servers import SERVED, serve, wait_for

MiB = 1024 * 1024
PATIENCE = 15.0  # seconds an answer may take on a loaded machine: only "did not hang"
DEADLINE = 3.0  # DOOR["BODY_TIMEOUT"] of these servers
CONCURRENT = [name for name in SERVED if name != "gunicorn-sync"]  # one process, many requests
WSGI = ("gunicorn-sync", "gunicorn-gthread", "runserver")


@pytest.fixture(scope="module", params=SERVED)
def server(request, tmp_path_factory):
    staged = tmp_path_factory.mktemp(f"staged-{request.param}")
    settings = {
        "SLOTS": 1,
        "QUEUE": 0,
        "WAIT": 30,
        "MAX_UPLOAD_SIZE": MiB,
        "DOOR": {"BODY_TIMEOUT": DEADLINE, "BODY_MIN_RATE": 1000, "BUDGET": 2},
    }
    with serve(request.param, pdfpool=settings, staged=staged) as running:
        running.name = request.param  # type: ignore[attr-defined]
        running.staged = staged  # type: ignore[attr-defined]
        yield running


def concurrent_only(server) -> None:
    if server.name not in CONCURRENT:
        pytest.skip("gunicorn's sync worker serves one request at a time, each its own pool")


def snapshot(url: str) -> dict:
    return httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()


def post_form(url: str, data: bytes, address: str, **headers: str) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=60) as client:
        return client.post(
            f"{url}/gated/",
            content=form(data),
            headers={
                "content-type": "multipart/form-data; boundary=b",
                **{name.replace("_", "-"): value for name, value in headers.items()},
            },
        )


@contextlib.contextmanager
def gated(server, data: bytes, address: str) -> Iterator[object]:
    """An upload holding the only slot (from ``address``) until the block ends."""
    import concurrent.futures

    gate: Path = server.staged / "open"
    gate.unlink(missing_ok=True)
    with concurrent.futures.ThreadPoolExecutor(1) as threads:
        first = threads.submit(post_form, server.url, data, address, accept="application/json")
        try:
            wait_for(lambda: snapshot(server.url)["running"] == 1, PATIENCE)
            yield first
        finally:
            gate.touch()
            assert first.result(PATIENCE).status_code == 200


def refused_unread(server, request: bytes, address: str = "127.0.6.1"):
    """The answer to ``request`` (headers only: no body byte is ever sent)."""
    with connect(port_of(server.url), address) as sock:
        sock.sendall(request)
        assert answered(sock, PATIENCE)
        _raw, status, fields, body = read_answer(sock)
    return status, fields, body


def error_of(body: bytes) -> str | None:
    try:
        return json.loads(body).get("error")
    except ValueError:
        return None  # the server's own answer, not Django's


def test_a_declared_size_over_the_limit_is_413_before_the_body(server):
    """runserver included: no hop-by-hop header from the app (wsgiref made that a 500)."""
    status, _, body = refused_unread(server, form_head("/sync/", 200 * MiB))
    assert status == 413 and error_of(body) == "too_large"


def test_a_lowercase_post_meets_the_door(server):
    request = form_head("/sync/", 200 * MiB).replace(b"POST ", b"post ", 1)
    status, _, body = refused_unread(server, request)
    if server.name.startswith("gunicorn"):  # gunicorn refuses the method itself
        assert status == 400 and error_of(body) is None
    else:
        assert status == 413 and error_of(body) == "too_large"


def test_a_repeated_content_type_is_400_before_the_body(server):
    if server.name == "runserver":
        pytest.skip("wsgiref passes the first Content-Type only: Django and the door read one")
    request = head(
        "/sync/",
        content_type="multipart/form-data; boundary=b",
        content_length="1000",
        pdf_digest=format_digest(sha(b"x")),
    ).replace(b"\r\n\r\n", b"\r\nContent-Type: application/pdf\r\n\r\n")
    status, _, body = refused_unread(server, request)
    expected = None if server.name.startswith("gunicorn") else "repeated_header"  # its own 400
    assert status == 400 and error_of(body) == expected


def test_a_content_length_list_of_equal_values_is_read_as_that_value(server):
    request = head(
        "/sync/",
        content_type="multipart/form-data; boundary=b",
        content_length=f"{200 * MiB}, {200 * MiB}",
    )
    status, _, body = refused_unread(server, request)
    if error_of(body) is None:  # the server refuses the list itself (gunicorn, hypercorn)
        assert status == 400
    else:
        assert status == 413 and error_of(body) == "too_large"


def test_a_chunked_multipart_upload_is_411_from_the_headers(server):
    request = head(
        "/sync/", content_type="multipart/form-data; boundary=b", transfer_encoding="chunked"
    )
    status, _, body = refused_unread(server, request)
    assert status == 411 and error_of(body) == "length_required"


def test_a_chunked_pdf_body_is_read_under_asgi_and_411_under_wsgi(server):
    """ASGI servers pass a chunked body on; Django reads none under WSGI (no Content-Length):
    there the answer asks for a length, it does not say nothing was sent."""
    data = pdfs.simple(["sent chunked"])
    with contextlib.closing(connect(port_of(server.url), "127.0.6.9")) as sock:
        sock.sendall(head("/sync/", content_type="application/pdf", transfer_encoding="chunked"))
        sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        _, status, headers, body = read_answer(sock)
    body = body[: int(headers["content-length"])]  # runserver reads the chunks as a request
    if server.name.startswith(("gunicorn", "runserver")):
        assert status == 411 and error_of(body) == "length_required"
    else:
        assert status == 200 and "sent chunked" in json.loads(body)["pdf"]["text"]


def test_a_declared_digest_that_lies_runs_and_joins_nothing(server):
    data, other = b"%PDF- what it says", b"%PDF- what it is"
    before = snapshot(server.url)["counters"]
    answer = post_form(
        server.url,
        other,
        "127.0.6.2",
        accept="application/json",
        pdf_digest=format_digest(sha(data)),
    )
    assert answer.status_code == 400 and answer.json()["error"] == "digest_mismatch"
    after = snapshot(server.url)["counters"]
    assert (after["started"], after["joined"]) == (before["started"], before["joined"])


def test_an_undeclared_twin_joins_with_every_place_taken(server):
    """SLOTS 1, QUEUE 0, a job running: an identical upload that declares nothing is let
    in on the budget, hashed, and joins; a different one gets the pool's 503 once read."""
    concurrent_only(server)
    data = b"%PDF- the twin " + server.name.encode()
    before = snapshot(server.url)["counters"]
    import concurrent.futures

    with (
        concurrent.futures.ThreadPoolExecutor(1) as threads,
        gated(server, data, "127.0.6.10"),
    ):
        twin = threads.submit(post_form, server.url, data, "127.0.6.11", accept="application/json")
        wait_for(
            lambda: snapshot(server.url)["counters"]["joined"] == before["joined"] + 1, PATIENCE
        )
        other = post_form(server.url, b"%PDF- other", "127.0.6.12", accept="application/json")
        assert other.status_code == 503 and other.json()["error"] == "busy"
    assert twin.result(PATIENCE).status_code == 200


def test_a_busy_caller_gets_429_from_the_headers(server):
    concurrent_only(server)
    with gated(server, b"%PDF- mine " + server.name.encode(), "127.0.6.20"):
        request = form_head("/gated/", 1000, pdf_digest=format_digest(sha(b"%PDF- mine too")))
        status, fields, body = refused_unread(server, request, "127.0.6.20")
        assert status == 429 and error_of(body) == "caller_busy"
        assert int(fields["retry-after"]) >= 1


def test_a_form_that_cannot_hold_the_file_gets_djangos_400_with_every_place_taken(server):
    """A form smaller than the smallest envelope of a file field, or without a boundary,
    never reaches the pool (Django finds no file): its 400, as with the door off, never the
    full pool's 503."""
    concurrent_only(server)
    with gated(server, b"%PDF- no file beside " + server.name.encode(), "127.0.6.25"):
        for content_type, body, code in (
            ("multipart/form-data; boundary=b", b"", "no_upload"),
            ("multipart/form-data; boundary=b", b"--b--\r\n", "no_upload"),
            ("multipart/form-data", b"0123456789", None),  # Django's own 400
        ):
            request = head("/gated/", content_type=content_type, content_length=str(len(body)))
            with connect(port_of(server.url), "127.0.6.26") as sock:
                sock.sendall(request + body)
                _raw, status, _, answer = read_answer(sock)
            assert (status, error_of(answer)) == (400, code), (content_type, body, answer)


def test_chunks_frame_the_body_whatever_content_length_says(server):
    """``Content-Length`` beside ``Transfer-Encoding: chunked``: the chunks frame the body
    (RFC 9112 6.3), as the servers that take such a request read it and the pool then
    reads it, so its length proves nothing. A raw PDF sent so with a length of 0 extracts;
    with a length no job has, the pool full, it joins its twin."""
    if server.name not in ("uvicorn", "hypercorn", "granian"):
        pytest.skip("it refuses a request with both itself")
    import concurrent.futures

    data = b"%PDF- framed by chunks " + server.name.encode()

    def chunked(length: int) -> tuple[int, dict]:
        request = head(
            "/gated/", content_type="application/pdf", content_length=str(length),
            transfer_encoding="chunked",
        )  # fmt: skip
        with connect(port_of(server.url), "127.0.6.41") as sock:
            sock.sendall(request + b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            _raw, status, _, body = read_answer(sock)
        return status, json.loads(body)

    (server.staged / "open").touch()
    assert chunked(0) == (200, {"pdf": {"sha256": sha(data), "size": len(data)}})
    before = snapshot(server.url)["counters"]
    with (
        concurrent.futures.ThreadPoolExecutor(1) as threads,
        gated(server, data, "127.0.6.40"),
    ):  # fmt: skip
        twin = threads.submit(chunked, 5)
        wait_for(
            lambda: snapshot(server.url)["counters"]["joined"] == before["joined"] + 1, PATIENCE
        )
    assert twin.result(PATIENCE)[0] == 200


def test_past_the_budget_the_door_answers_from_the_headers(server):
    """Two silent undeclared uploads (from two networks: the door counts anonymous callers
    per /24) fill the budget (2); the third gets 503 unread."""
    concurrent_only(server)
    with gated(server, b"%PDF- budget " + server.name.encode(), "127.0.6.30"):
        holders = [connect(port_of(server.url), f"127.0.{61 + i}.1") for i in range(2)]
        try:
            for sock in holders:
                sock.sendall(form_head("/gated/", 1000))
            wait_for(
                lambda: len(snapshot(server.url).get("door", {}).get("held", [])) == 2, PATIENCE
            )
            status, _, body = refused_unread(server, form_head("/gated/", 1000), "127.0.63.1")
            assert status == 503 and error_of(body) == "busy"
            assert snapshot(server.url)["door"]["shed"] >= 1
        finally:
            for sock in holders:
                sock.close()


def test_an_upload_framed_by_no_length_is_empty_past_the_budget_too(server):
    """HTTP/1.1 without ``Content-Length`` or chunks: no body (RFC 9112), Django's 400
    ``no_upload`` as with the door off, never the shed 503 of a body that might join; nor is
    a chunked PDF under WSGI, where Django reads none (411)."""
    concurrent_only(server)
    with gated(server, b"%PDF- unframed " + server.name.encode(), "127.0.6.35"):
        holders = [connect(port_of(server.url), f"127.0.{64 + i}.1") for i in range(2)]
        try:
            for sock in holders:
                sock.sendall(form_head("/gated/", 1000))
            wait_for(lambda: len(snapshot(server.url)["door"]["held"]) == 2, PATIENCE)
            for content_type in ("application/pdf", "multipart/form-data; boundary=b"):
                request = head("/gated/", content_type=content_type)
                status, _, body = refused_unread(server, request, "127.0.66.1")
                assert (status, error_of(body)) == (400, "no_upload"), content_type
            if server.name in WSGI:  # Django reads no chunks there: the view's 411, not a shed
                chunked = head(
                    "/gated/", content_type="application/pdf", transfer_encoding="chunked"
                )
                status, _, body = refused_unread(server, chunked, "127.0.66.2")
                assert (status, error_of(body)) == (411, "length_required")
        finally:
            for sock in holders:
                sock.close()


def test_a_silent_body_gives_its_place_back_at_the_deadline(server):
    """A client sends its headers and nothing: it holds the only place until the deadline,
    then the place is free again (ASGI: it gets 408 and its connection is closed)."""
    concurrent_only(server)
    with connect(port_of(server.url), "127.0.6.40") as silent:
        silent.sendall(form_head("/gated/", 1000))
        wait_for(lambda: len(snapshot(server.url).get("door", {}).get("held", [])) == 1, PATIENCE)
        (held,) = snapshot(server.url)["door"]["held"]  # who holds the place: its network
        assert (held["caller"], held["kind"], held["received"]) == ("ip:127.0.6.0/24", "place", 0)
        assert 0 <= held["age"] < DEADLINE + PATIENCE
        started = time.monotonic()
        if server.name in ("uvicorn", "hypercorn", "granian"):
            _raw, status, fields, body = read_answer(silent)
            assert status == 408 and error_of(body) == "body_timeout"
            assert fields.get("connection") == "close"
            assert silent.recv(1) == b""  # closed
        wait_for(lambda: not snapshot(server.url).get("door", {}).get("held"), PATIENCE + DEADLINE)
        assert time.monotonic() - started < PATIENCE + DEADLINE  # did not hang
    (server.staged / "open").touch()
    answer = post_form(
        server.url, b"%PDF- next", "127.0.6.41", pdf_digest=format_digest(sha(b"%PDF- next"))
    )
    assert answer.status_code == 200


def test_a_trickling_body_gets_408_at_the_deadline(server):
    if server.name not in ("uvicorn", "hypercorn", "granian"):
        pytest.skip("a WSGI server blocks in its read: the place is given back, no 408 sent")
    with connect(port_of(server.url), "127.0.6.50") as sock:
        sock.sendall(form_head("/gated/", 100_000))
        started = time.monotonic()
        while not answered(sock, 0.2):
            sock.sendall(b"x")  # 5 bytes a second, far below BODY_MIN_RATE
            assert time.monotonic() - started < PATIENCE + DEADLINE
        _raw, status, _, body = read_answer(sock)
    assert status == 408 and error_of(body) == "body_timeout"
    assert time.monotonic() - started >= DEADLINE * 0.9


SAME = ("date", "server", "connection", "content-length", "transfer-encoding")  # the wire's own


@pytest.mark.parametrize("name", ["uvicorn", "gunicorn-gthread"])
def test_a_refusal_has_the_headers_of_the_views_with_the_door_off(tmp_path, name):
    """The pool full (503) and a size over the limit (413), for a client without a session and
    one with a stale cookie: every header the door's answer carries is the view's, ``Vary:
    Cookie`` and the stale cookie's replacement included (the view's caller read the session)."""
    pdf = pdfs.simple(["mine"])
    stale = "sessionid=" + "s" * 32  # no signature: an empty session, its cookie replaced
    cases = [(size, cookie) for size in (len(pdf), 2 * MiB) for cookie in ("", stale)]
    answers: dict[bool, list] = {}
    for door in (False, True):
        staged = tmp_path / f"staged-{door}"
        staged.mkdir()
        settings = {"SLOTS": 1, "QUEUE": 0, "WAIT": 30, "MAX_UPLOAD_SIZE": MiB, "DOOR": door}
        env = {"DJANGO_SETTINGS_MODULE": "tests.e2e.cookie_sessions"}
        with serve(name, pdfpool=settings, staged=staged, env=env) as running:
            running.staged = staged  # type: ignore[attr-defined]
            with gated(running, pdfs.simple(["theirs"]), "127.0.7.1"):
                answers[door] = [refused_with(running.url, pdf, *case) for case in cases]
    assert answers[True] == answers[False]
    assert [status for status, _ in answers[True]] == [503, 503, 413, 413]


def refused_with(url: str, pdf: bytes, size: int, cookie: str) -> tuple[int, dict[str, str]]:
    body = pdf + b" " * (size - len(pdf))
    headers = {
        "content-type": "application/pdf",
        "repr-digest": format_digest(sha(body)),
        "accept": "application/json",
        **({"cookie": cookie} if cookie else {}),
    }
    with httpx.Client(timeout=PATIENCE) as client:
        answer = client.post(f"{url}/gated/", content=body, headers=headers)
    said = {k: v for k, v in answer.headers.items() if k not in SAME and k != "retry-after"}
    return answer.status_code, said
