"""The attacks of docs/security.md on the door, tried as an attacker would, over raw sockets
on uvicorn: bytes declared but not sent, other people's browsers, answers that differ from
the framework's, a refused connection kept open, a body asked for that cannot join."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from django_pdfpool.record import format_digest
from tests.e2e.test_door_servers import (
    PATIENCE,
    MiB,
    _final,
    answered,
    connect,
    continued,
    form_head,
    head,
    port_of,
    read_answer,
    settings,
)
from tests.e2e.test_example import JSON, PROJECT, demo_env, manage
from tests.support import pdfs
from tests.support.servers import serve, uvicorn, wait_for

CONTRIB = {"DJANGO_SETTINGS_MODULE": "tests.project.contrib_settings"}
CONTRIB_APP = "tests.project.contrib_asgi:application"
DOOR_APP = "tests.project.door_asgi:application"
TRICKLE = 600  # bytes a second: above BODY_MIN_RATE, so the deadline never ends them early
KEEP_ALIVE = 5.0  # uvicorn's --timeout-keep-alive default


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("door-attacks")
    migrated = manage(directory, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    return directory


@pytest.fixture
def staged(tmp_path) -> Path:
    path = tmp_path / "staged"
    path.mkdir()
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (reading what it sends)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False


def trickle(port: int, address: str, start: bytes, stop: threading.Event) -> None:
    """Send ``start`` (a request's head), then a byte every ``1 / TRICKLE`` s in chunks of
    a tenth of a second, until ``stop``."""
    with connect(port, address) as sock:
        sock.sendall(start)
        while not stop.wait(0.1):
            try:
                sock.sendall(b"x" * (TRICKLE // 10))
            except OSError:
                return


def test_tricklers_declaring_big_bodies_keep_nobody_out(staged):
    """SLOTS 1, QUEUE 1, MAX_UPLOAD_SIZE 50 MiB: two multipart tricklers on the two places,
    two raw PDFs declaring 50 MiB and 14 MiB trickled, each at 600 B/s from its own
    network; meanwhile every complete small upload from a fresh address gets 200 (a body
    holds what it has sent, not what it declares). ``DOOR_ATTACK_SECONDS`` runs it longer."""
    import os

    seconds = float(os.environ.get("DOOR_ATTACK_SECONDS", "6"))
    pool = settings(SLOTS=1, QUEUE=1, MAX_UPLOAD_SIZE=50 * MiB)
    stop, answers = threading.Event(), []
    pdf = {"content_type": "application/pdf"}
    heads = [
        form_head("/sync/", 40 * MiB),
        form_head("/sync/", 40 * MiB),
        head("/sync/", content_length=str(50 * MiB), **pdf),
        head("/sync/", content_length=str(14 * MiB), **pdf),
    ]
    with (
        uvicorn(DOOR_APP, pdfpool=pool, staged=staged) as server,
        concurrent.futures.ThreadPoolExecutor(4) as threads,
    ):
        port = port_of(server.url)
        tricklers = [
            threads.submit(trickle, port, f"127.0.{20 + i}.1", start, stop)
            for i, start in enumerate(heads)
        ]
        wait_for(lambda: len(_held(server.url)) == 4, PATIENCE)
        try:
            deadline, n = time.monotonic() + seconds, 0
            while time.monotonic() < deadline:
                n += 1
                data = pdfs.simple([f"fresh upload {n}"])
                transport = httpx.HTTPTransport(local_address=f"127.1.{n % 250}.{n // 250 + 1}")
                with httpx.Client(transport=transport, timeout=PATIENCE) as client:
                    answer = client.post(
                        f"{server.url}/sync/",
                        files={"file": ("doc.pdf", data, "application/pdf")},
                        headers=JSON,
                    )
                answers.append((answer.status_code, answer.text[:150]))
            assert len(_held(server.url)) == 4  # the tricklers were there all along
        finally:
            stop.set()
            for trickler in tricklers:
                trickler.result(PATIENCE)
    assert answers and {status for status, _ in answers} == {200}, answers[:3]
    print(f"{len(answers)} fresh uploads in {seconds:.0f} s beside four tricklers: all 200")


def _held(url: str) -> list[dict]:
    """The bodies the door holds (the test project's snapshot of its pool and door)."""
    return list(httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()["door"]["held"])


def test_a_cross_site_post_gets_djangos_403_before_its_body(state):
    """Any web page can make its visitors POST to the CSRF-protected upload page: the door
    answers Django's own 403 from the headers (the Origin is not the site's) and closes the
    connection; the body is never asked for (sent anyway, it is read and dropped first). The
    site's own origin without a CSRF cookie: Django's 403 from the headers too; with one, it is
    let through: its body asked for, then Django's own answer (403: no CSRF token)."""
    with uvicorn("demo.asgi:application", env=demo_env(state), cwd=PROJECT) as server:
        port = port_of(server.url)
        host = f"Host: 127.0.0.1:{port}".encode()  # one the site serves (else Django's 400)
        with connect(port, "127.0.30.1") as sock:
            foreign = {"origin": "https://evil.example", "sec_fetch_site": "cross-site"}
            cross = form_head("/", 100_000, **foreign)
            sock.sendall(cross.replace(b"Host: test", host))
            assert answered(sock, PATIENCE)  # not a body byte sent
            _raw, status, fields, body = read_answer(sock)
            assert status == 403 and b"CSRF" in body, body[:200]
            assert fields["connection"] == "close"
            assert send_paced(sock, 100_000) is None  # sent anyway: read and dropped
            assert read_to_close(sock, KEEP_ALIVE) == b""
        own = {"origin": f"http://127.0.0.1:{port}", "expect": "100-continue"}
        with connect(port, "127.0.30.2") as sock:  # no CSRF cookie: refused from the headers
            sock.sendall(form_head("/", 100_000, **own).replace(b"Host: test", host))
            raw, status, _fields, body = read_answer(sock)
            assert status == 403 and b"CSRF" in body and b" 100 " not in raw, raw[:200]
        with connect(port, "127.0.30.3") as sock:  # a cookie: the token decides, after the body
            cookie = form_head("/", 100_000, cookie=f"csrftoken={'A' * 32}", **own)
            sock.sendall(cookie.replace(b"Host: test", host))
            assert continued(sock)  # the door let it in: the body is asked for
            part, end = b'--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n', b"\r\n--b--\r\n"
            sock.sendall(part + b"x" * (100_000 - len(part) - len(end)) + end)  # a form, no token
            _raw, status, _fields, body = read_answer(sock)
            assert status == 403 and b"CSRF" in body, body[:200]  # Django's, after the body


def test_an_api_key_user_is_not_taken_for_its_address(staged):
    """A django-ninja ``APIKeyHeader`` user beside an anonymous neighbour on the same
    address, whose job runs: the framework names the caller, so the door does not (no 429
    for the address); the pool, asked after ninja's authentication, runs it: 200."""
    pool = settings(SLOTS=2)
    with (
        uvicorn(CONTRIB_APP, pdfpool=pool, staged=staged, env=CONTRIB) as server,
        concurrent.futures.ThreadPoolExecutor(1) as threads,
    ):
        client = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.31.1"), timeout=60)
        neighbour = threads.submit(
            client.post, f"{server.url}/gated/", files={"file": ("a.pdf", b"%PDF-n")}
        )
        wait_for(lambda: _running(server.url) == 1, PATIENCE)
        try:
            data = pdfs.simple(["keyed"])
            keyed = client.post(
                f"{server.url}/ninja/keyed",
                files={"file": ("b.pdf", data, "application/pdf")},
                headers={"x-api-key": "k-alice", "pdf-digest": format_digest(sha(data))},
            )
        finally:
            (staged / "open").touch()
        assert keyed.status_code == 200, keyed.text
        assert neighbour.result(PATIENCE).status_code == 200


@pytest.mark.parametrize("route", ["/drf/apiview/extract/", "/ninja/extract"])
def test_an_anonymous_upload_declaring_a_digest_gets_the_frameworks_401(staged, route):
    """The pool is full and the upload declares a digest nobody runs, but it carries no
    credentials and the route requires them: the framework's 401, before its body, with
    the connection closed (docs/drf.md, docs/ninja.md)."""
    pool = settings(DOOR={"BUDGET": 0})
    with (
        uvicorn(CONTRIB_APP, pdfpool=pool, staged=staged, env=CONTRIB) as server,
        concurrent.futures.ThreadPoolExecutor(1) as threads,
    ):
        first = threads.submit(
            httpx.post,
            f"{server.url}/drf/documents/gated/",
            files={"file": ("a.pdf", b"%PDF- gated")},
            headers={"authorization": "Token bob"},
            timeout=60,
        )
        wait_for(lambda: _running(server.url) == 1, PATIENCE)
        try:
            with connect(port_of(server.url), "127.0.32.1") as sock:
                digest = format_digest("ab" * 32)
                sock.sendall(form_head(route, 50_000, pdf_digest=digest))
                assert answered(sock, PATIENCE), route  # no body byte sent
                _raw, status, fields, body = read_answer(sock)
                assert status == 401, (route, body)
                assert fields["connection"] == "close"
        finally:
            (staged / "open").touch()
        assert first.result(PATIENCE).status_code == 200


def test_a_connection_refused_from_the_headers_is_closed(staged):
    """A 400 for an unreadable digest, body declared and unsent; then one body byte and
    silence: the server closes the connection (``Connection: close``), within its
    keep-alive timeout, so an unread body never keeps a socket."""
    with uvicorn(DOOR_APP, pdfpool=settings(), staged=staged) as server:
        socks, answers = [], []
        try:
            for n in range(5):
                sock = connect(port_of(server.url), f"127.0.33.{n + 1}")
                socks.append(sock)
                sock.sendall(form_head("/gated/", 10_000, pdf_digest="sha-256=nonsense"))
                assert answered(sock, PATIENCE)
                answers.append(read_answer(sock)[1:3])
                sock.sendall(b"-")  # one body byte, then silence
            assert all(closed_by_server(sock, KEEP_ALIVE + 2.0) for sock in socks)
            assert all(s == 400 and f.get("connection") == "close" for s, f in answers)
        finally:
            for sock in socks:
                sock.close()


def send_paced(sock: socket.socket, size: int) -> OSError | None:
    """Send ``size`` body bytes 16 KiB at a time through a small send buffer, each piece
    only once the server has taken the one before (paced by the socket, as a real link
    paces it); the error a send met, if any."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    try:
        for start in range(0, size, 16384):
            sock.sendall(b"x" * min(16384, size - start))
    except OSError as error:  # the server closed with the body unread: the kernel's reset
        return error
    return None


def read_to_close(sock: socket.socket, within: float) -> bytes | None:
    """All the server sends until it closes the connection cleanly; None if it resets it or
    keeps it open past ``within`` seconds."""
    sock.settimeout(0.2)
    raw, deadline = b"", time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return None
        if not chunk:
            return raw
        raw += chunk
    return None


@pytest.mark.parametrize("expect", [False, True])
@pytest.mark.parametrize("name", ["uvicorn", "hypercorn"])
def test_a_body_refused_from_the_headers_is_read_and_dropped_before_the_close(staged, name, expect):
    """A 400 from the headers (an unreadable digest), its declared 1 MB body sent anyway
    once the answer is in, paced by the socket: every send is taken and the whole answer is
    read, then the server closes cleanly (``asgi.linger``); closed at once, the kernel
    answers the unread body with a reset. With ``Expect: 100-continue``: never a
    ``100 Continue``, though the drain calls ``receive()``. (granian ends ``receive()`` when
    the answer starts, and closes at once: docs/door.md.)"""
    size = 64 * 16384
    extra = {"expect": "100-continue"} if expect else {}
    with (
        serve(name, pdfpool=settings(), staged=staged) as server,
        connect(port_of(server.url), "127.0.35.1") as sock,
    ):
        sock.sendall(form_head("/gated/", size, pdf_digest="sha-256=nonsense", **extra))
        assert answered(sock, PATIENCE)  # the answer is in before the body goes
        error = send_paced(sock, size)
        raw = read_to_close(sock, KEEP_ALIVE)
    assert error is None, f"a send failed: {error!r}"
    assert raw is not None, "reset, or not closed"
    assert b"100 Continue" not in raw
    status, fields, body = _final(raw) or (0, {}, b"")
    assert status == 400 and fields["connection"] == "close", raw[:300]
    assert len(body) == int(fields["content-length"]) and json.loads(body)["error"]


def test_the_drain_after_a_refusal_reads_a_few_mib_at_most(staged):
    """A 413 from the headers for 200 MiB, and the client sends as fast as it can: the door
    drops ``LINGER_BYTES`` of it, then the server closes (a reset: the rest is unread), long
    before the 200 MiB are through (about 10 MiB here; without the cap, all 200 in well under
    the 2 s)."""
    sent = 0
    with (
        uvicorn(DOOR_APP, pdfpool=settings(), staged=staged) as server,
        connect(port_of(server.url), "127.0.35.2") as sock,
    ):
        sock.sendall(form_head("/gated/", 200 * MiB))
        assert answered(sock, PATIENCE)
        with contextlib.suppress(OSError):
            while sent < 200 * MiB:
                sock.sendall(b"x" * MiB)
                sent += MiB
    assert sent < 100 * MiB, sent  # 4 MiB dropped, plus the kernels' buffers (tcp_rmem, tcp_wmem)
    print(f"{sent // MiB} MiB taken before the close")


def test_a_small_undeclared_upload_beside_a_busy_large_job_is_refused_unread(staged):
    """One slot, no queue, busy on a 2.8 MB upload: a 30 KB form cannot carry the same file
    (a file is never larger than the body carrying it), so it gets the pool's 503 from its
    headers, never ``100 Continue``, and the refusal counts in the pool's counters."""
    large = b"%PDF-" + b"x" * 2_800_000
    with (
        uvicorn(DOOR_APP, pdfpool=settings(MAX_UPLOAD_SIZE=4 * MiB), staged=staged) as server,
        concurrent.futures.ThreadPoolExecutor(1) as threads,
    ):  # fmt: skip
        first = threads.submit(
            httpx.post, f"{server.url}/gated/", files={"file": ("a.pdf", large)}, timeout=60
        )
        wait_for(lambda: _running(server.url) == 1, PATIENCE)
        try:
            with connect(port_of(server.url), "127.0.34.1") as sock:
                sock.sendall(form_head("/gated/", 30_000, expect="100-continue"))
                assert answered(sock, PATIENCE)
                raw, status, fields, body = read_answer(sock)
            assert b"100 Continue" not in raw
            assert status == 503 and json.loads(body)["error"] == "busy"
            assert fields["connection"] == "close"
            counters = httpx.get(f"{server.url}/snapshot/", timeout=PATIENCE).json()
            assert counters["counters"]["refused_busy"] == 1, counters
        finally:
            (staged / "open").touch()
        assert first.result(PATIENCE).status_code == 200


def _running(url: str) -> int:
    return int(httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()["running"])


def test_one_network_holds_one_place(staged):
    """SLOTS 2, no queue: two silent bodies from one /24 hold one place (the second can only
    be a budget entry), so a body from another network still finds the second place."""
    with uvicorn(DOOR_APP, pdfpool=settings(SLOTS=2), staged=staged) as server:
        port, socks = port_of(server.url), []
        try:
            for n, address in enumerate(("127.0.41.1", "127.0.41.2", "127.0.42.1")):
                socks.append(connect(port, address))
                socks[-1].sendall(form_head("/gated/", 1000))
                wait_for(lambda n=n: len(_held(server.url)) == n + 1, PATIENCE)
            held = {(h["caller"], h["kind"]) for h in _held(server.url)}
            assert held == {
                ("ip:127.0.41.0/24", "place"),
                ("ip:127.0.41.0/24", "budget"),
                ("ip:127.0.42.0/24", "place"),
            }, held
        finally:
            for sock in socks:
                sock.close()
