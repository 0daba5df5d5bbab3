"""The door on real servers, spoken to with raw sockets: uvicorn serving
``PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))``
(tests/project/door_asgi.py), and gunicorn serving the WSGI application, where
``AdmissionMiddleware`` is the door."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import select
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from django_pdfpool.record import format_digest
from tests.support import pdfs
from tests.support.servers import gunicorn, read_all_sent, serve, uvicorn, wait_for

MiB = 1024 * 1024
LIMIT = MiB  # MAX_UPLOAD_SIZE of these servers
SLACK = 64 * 1024  # the form overhead allowed over it (record.MULTIPART_SLACK)
PATIENCE = 15.0  # seconds an answer may take on a loaded machine: only "did not hang"


def settings(**values) -> dict:
    return {
        "SLOTS": 1,
        "QUEUE": 0,
        "WAIT": 30,
        "MAX_UPLOAD_SIZE": LIMIT,
        **values,
    }


@pytest.fixture
def staged(tmp_path) -> Path:
    path = tmp_path / "staged"
    path.mkdir()
    return path


@pytest.fixture
def server(staged):
    with uvicorn(
        "tests.project.door_asgi:application", pdfpool=settings(), staged=staged
    ) as running:
        yield running


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# --- raw HTTP/1.1 -------------------------------------------------------------------


def connect(port: int, address: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=PATIENCE, source_address=(address, 0)
    )
    return sock


def head(path: str, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: test", "Accept: application/json"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answered(sock: socket.socket, timeout: float) -> bool:
    return bool(select.select([sock], [], [], timeout)[0])


def continued(sock: socket.socket) -> bool:
    """Whether the server's first answer to a head sent with ``Expect: 100-continue`` is
    ``100 Continue`` (the application asked for the body: uvicorn's first ``receive()``)
    rather than a final answer from the headers."""
    raw = b""
    deadline = time.monotonic() + PATIENCE
    while b"\r\n\r\n" not in raw and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        raw += chunk
    return raw.startswith(b"HTTP/1.1 100 ")


def read_answer(sock: socket.socket) -> tuple[bytes, int, dict[str, str], bytes]:
    """Everything the server sent until it closed (or its answer is complete): the raw
    bytes, the final status, its headers and body."""
    raw = b""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        raw += chunk
        final = _final(raw)
        if final is not None and len(final[2]) >= int(final[1].get("content-length", 10**9)):
            break
    final = _final(raw)
    assert final is not None, raw
    return raw, *final


def _final(raw: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """The final (non-1xx) response in ``raw``, once its head is complete."""
    rest = raw
    while b"\r\n\r\n" in rest:
        top, rest = rest.split(b"\r\n\r\n", 1)
        lines = top.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if status >= 200:
            fields = dict(line.split(": ", 1) for line in lines[1:])
            return status, {k.lower(): v for k, v in fields.items()}, rest
    return None


def form_head(path: str, size: int, **headers: str) -> bytes:
    return head(
        path, content_type="multipart/form-data; boundary=b", content_length=str(size), **headers
    )


def snapshot(url: str) -> dict:
    return httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()


@contextmanager
def gated_job(
    url: str, staged: Path, data: bytes, address: str = "127.0.5.1"
) -> Iterator[concurrent.futures.Future]:
    """An upload of ``data`` to the gated view, holding the only slot until the block ends."""

    def post() -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(transport=transport, timeout=60) as client:
            return client.post(
                f"{url}/gated/",
                files={"file": ("a.pdf", data)},
                headers={"accept": "application/json"},
            )

    with concurrent.futures.ThreadPoolExecutor(1) as threads:
        future = threads.submit(post)
        try:
            wait_for(lambda: snapshot(url)["running"] == 1, timeout=PATIENCE)
            yield future
        finally:
            (staged / "open").touch()
            future.result(PATIENCE)


# --- uvicorn -------------------------------------------------------------------------


def test_a_declared_200_mib_upload_gets_413_before_its_body(server):
    with connect(port_of(server.url)) as sock:
        sock.sendall(form_head("/sync/", 200 * MiB))
        assert answered(sock, PATIENCE)  # no body byte sent: less than 1 MiB, as asked
        _raw, status, fields, body = read_answer(sock)
    assert status == 413 and json.loads(body)["error"] == "too_large"
    assert fields["connection"] == "close"


def test_a_chunked_upload_over_the_limit_gets_413_before_limit_plus_1_mib(server):
    """The body is sent 16 KiB at a time, each only once the server has read what came
    before: the bytes sent when the answer comes are the bytes the server took."""
    port, address, chunk = port_of(server.url), "127.0.5.9", b"x" * 16384
    with connect(port, address) as sock:
        sock.sendall(head("/sync/", content_type="application/pdf", transfer_encoding="chunked"))
        sent = 0
        while not answered(sock, 0) and sent < LIMIT + 2 * MiB:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
            wait_for(
                lambda: read_all_sent(server.pid, port, address) or answered(sock, 0), PATIENCE
            )
        _raw, status, _, body = read_answer(sock)
    assert status == 413 and json.loads(body)["error"] == "too_large"
    assert LIMIT < sent < LIMIT + MiB


def test_a_saturated_pool_refuses_an_expect_100_upload_without_100_continue(server, staged):
    with gated_job(server.url, staged, b"%PDF- gated"):
        with connect(port_of(server.url), "127.0.5.2") as sock:
            sock.sendall(
                form_head(
                    "/sync/",
                    900 * 1024,
                    expect="100-continue",
                    pdf_digest=format_digest(hashlib.sha256(b"%PDF- not in flight").hexdigest()),
                )
            )
            raw, status, fields, body = read_answer(sock)
        assert b"100 Continue" not in raw
        assert status == 503 and json.loads(body)["error"] == "busy"
        assert int(fields["retry-after"]) >= 1
    # with the slot free again, the same request gets its 100 Continue
    with connect(port_of(server.url), "127.0.5.3") as sock:
        sock.sendall(form_head("/sync/", 1000, expect="100-continue"))
        assert answered(sock, PATIENCE)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")


def test_a_client_that_sends_its_body_at_once_gets_the_refusal_then_a_close(server, staged):
    """No ``Expect``: the whole request is written before the answer is read. The door's
    503 still reaches it, with ``Connection: close``: a body the door did not read never
    keeps the connection (docs/door.md)."""
    body = b"--b\r\n" + b"x" * 200_000 + b"\r\n--b--\r\n"
    with gated_job(server.url, staged, b"%PDF- gated for the reset"):
        for _ in range(5):  # a reset, when it happens, is a race: give it chances
            with connect(port_of(server.url), "127.0.5.7") as sock:
                sock.sendall(
                    form_head(
                        "/sync/",
                        len(body),
                        pdf_digest=format_digest(
                            hashlib.sha256(b"%PDF- not in flight").hexdigest()
                        ),
                    )
                    + body
                )
                _, status, fields, answer = read_answer(sock)
                assert status == 503 and json.loads(answer)["error"] == "busy"
                assert fields.get("connection") == "close"


def test_identical_uploads_join_while_saturated_declared_or_not(server, staged):
    """SLOTS 1, QUEUE 0, a job running: an identical upload joins it, whether it declares
    its digest (the door knows) or not (let in on the budget, hashed, then joined). The
    door used to shed the undeclared twin with 503."""
    data = b"%PDF- shared by three"
    before = snapshot(server.url)["counters"]
    with (
        concurrent.futures.ThreadPoolExecutor(2) as threads,
        gated_job(server.url, staged, data) as first,
    ):
        joiners = []
        for address, extra in (
            ("127.0.5.4", {"pdf-digest": format_digest(hashlib.sha256(data).hexdigest())}),
            ("127.0.5.5", {}),
        ):
            transport = httpx.HTTPTransport(local_address=address)
            client = httpx.Client(transport=transport, timeout=60)
            joiners.append(
                threads.submit(
                    client.post,
                    f"{server.url}/gated/",
                    files={"file": ("a.pdf", data)},
                    headers={"accept": "application/json", **extra},
                )
            )
        wait_for(
            lambda: snapshot(server.url)["counters"]["joined"] == before["joined"] + 2,
            PATIENCE,
        )
        (staged / "open").touch()
        joined = [joiner.result(PATIENCE) for joiner in joiners]
    assert [r.status_code for r in (first.result(), *joined)] == [200, 200, 200]
    assert first.result().json() == joined[0].json() == joined[1].json()


def test_an_undeclared_twin_with_expect_gets_100_continue_and_joins(server, staged):
    data = b"%PDF- expecting to join"
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n\r\n'
        + data
        + b"\r\n--b--\r\n"
    )
    before = snapshot(server.url)["counters"]
    with gated_job(server.url, staged, data), connect(port_of(server.url), "127.0.5.8") as sock:
        sock.sendall(form_head("/gated/", len(body), expect="100-continue"))
        assert answered(sock, PATIENCE)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")  # let in
        sock.sendall(body)
        wait_for(
            lambda: snapshot(server.url)["counters"]["joined"] == before["joined"] + 1,
            PATIENCE,
        )
        (staged / "open").touch()
        _, status, _, answer = read_answer(sock)
    assert status == 200 and json.loads(answer)["pdf"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_sigterm_does_not_wait_on_a_silent_client(staged):
    """A client that sends its headers and no body: uvicorn waits for the request at
    SIGTERM (it has no body timeout), the door's deadline ends it with 408."""
    with uvicorn(
        "tests.project.door_asgi:application",
        pdfpool=settings(DOOR={"BODY_TIMEOUT": 2}),
        staged=staged,
    ) as up:
        with connect(port_of(up.url), "127.0.5.10") as silent:
            silent.sendall(form_head("/sync/", 1000))
            wait_for(lambda: snapshot(up.url)["door"]["held"], PATIENCE)
            up.process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            up.process.wait(PATIENCE)  # raises if it hangs
            assert time.monotonic() - started < PATIENCE
            _raw, status, fields, _ = read_answer(silent)
        assert status == 408 and fields["connection"] == "close"


def test_a_raw_body_upload_extracts_and_a_lying_digest_runs_nothing(server):
    data = pdfs.simple(["a raw body upload"])
    raw = {"content-type": "application/pdf", "accept": "application/json"}
    good = httpx.post(
        f"{server.url}/sync/",
        content=data,
        timeout=60,
        headers={**raw, "repr-digest": format_digest(hashlib.sha256(data).hexdigest())},
    )
    assert good.status_code == 200 and "a raw body upload" in good.json()["pdf"]["text"]
    before = snapshot(server.url)["counters"]
    lying = httpx.post(
        f"{server.url}/sync/",
        content=data,
        timeout=60,
        headers={**raw, "content-digest": format_digest(hashlib.sha256(b"x").hexdigest())},
    )
    assert lying.status_code == 400 and lying.json()["error"] == "digest_mismatch"
    after = snapshot(server.url)["counters"]
    assert (after["started"], after["joined"]) == (before["started"], before["joined"])


@pytest.mark.parametrize("name", ["uvicorn", "hypercorn", "granian", "gunicorn-gthread"])
def test_a_client_gone_mid_body_gives_its_budget_entry_and_bytes_back(staged, name):
    """The pool full, budget entries (two, 40 KB between them) whose clients leave halfway
    through their body, reset or closed: each gives back its entry and every byte charged,
    so that two more bodies are let in on the budget after them, and nothing is held."""
    terms = settings(DOOR={"BUDGET": 2, "BUDGET_BYTES": 40_000, "BODY_TIMEOUT": 30})
    size = 30_000  # each reserves 20 KB, and is charged 25 KB when it leaves
    # WSGI: counted in the pieces TimedStream reads, of what 15 s earn at 500 B/s (7,500)
    arriving = [[25_000]] if name != "gunicorn-gthread" else [[22_500]]
    with serve(name, pdfpool=terms, staged=staged) as server:
        port = port_of(server.url)
        with gated_job(server.url, staged, b"%PDF- holding the only slot"):
            for n in range(6):
                with connect(port, f"127.0.{70 + n}.1") as sock:
                    sock.sendall(form_head("/gated/", size) + b"x" * 25_000)
                    wait_for(lambda: _held_bytes(server.url) in arriving, PATIENCE)
                    if n % 2:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                wait_for(lambda: not _held_bytes(server.url), PATIENCE)
            socks = [connect(port, f"127.0.{80 + n}.1") for n in range(2)]
            try:
                for sock in socks:
                    sock.sendall(form_head("/gated/", size))
                wait_for(lambda: _held_bytes(server.url) == [0, 0], PATIENCE)
            finally:
                for sock in socks:
                    sock.close()
        wait_for(lambda: not _held_bytes(server.url), PATIENCE)


def _held_bytes(url: str) -> list[int]:
    return [held["received"] for held in snapshot(url)["door"]["held"]]


# --- gunicorn (WSGI: AdmissionMiddleware) --------------------------------------------


def test_gunicorn_refuses_from_the_headers_too(staged):
    with gunicorn(pdfpool=settings(), staged=staged) as server:
        url = server.url
        wait_for(lambda: _up(url), PATIENCE)
        with connect(port_of(url)) as sock:
            sock.sendall(form_head("/sync/", 200 * MiB))
            assert answered(sock, PATIENCE)
            _, status, _, body = read_answer(sock)
        assert status == 413 and json.loads(body)["error"] == "too_large"
        with gated_job(url, staged, b"%PDF- gated wsgi"):
            with connect(port_of(url), "127.0.5.6") as sock:
                sock.sendall(
                    form_head(
                        "/sync/",
                        900 * 1024,
                        pdf_digest=format_digest(
                            hashlib.sha256(b"%PDF- not in flight").hexdigest()
                        ),
                    )
                )
                assert answered(sock, PATIENCE)  # before any body byte
                _, status, _, body = read_answer(sock)
            assert status == 503 and json.loads(body)["error"] == "busy"


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/snapshot/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize(
    "name", ["gunicorn-gthread", "runserver", "uvicorn", "hypercorn", "granian"]
)
def test_a_body_faster_than_the_min_rate_is_never_timed_out(staged, name):
    """BODY_TIMEOUT 1 s, BODY_MIN_RATE 500: a raw body of 4,000 bytes sent at 1,000 B/s
    (twice the rate): its bytes earn time as they come, though under WSGI Django asks its
    stream for them in one read: never timed out while it arrives (the status page asks
    ``expire`` over and over), and it gets the view's answer, not 408."""
    door = {"BODY_TIMEOUT": 1.0, "BODY_MIN_RATE": 500}
    size = 4000
    with serve(name, pdfpool=settings(DOOR=door), staged=staged) as server:
        url = server.url
        with connect(port_of(url), "127.0.6.1") as sock:
            sock.sendall(head("/sync/", content_type="application/pdf", content_length=str(size)))
            seen, sent, start = [], 0, time.monotonic()
            while sent < size:
                due = min(size, int((time.monotonic() - start) * 1000))  # 1,000 B/s
                sock.sendall(b"x" * (due - sent))
                sent = due
                door_now = snapshot(url)["door"]
                seen.append((round(time.monotonic() - start, 1), door_now["timed_out"]))
                time.sleep(0.05)
            _, status, _, _ = read_answer(sock)
        assert status != 408
        assert all(timed_out == 0 for _, timed_out in seen), seen
