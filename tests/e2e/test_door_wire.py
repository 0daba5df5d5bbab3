"""The door on against the door off, over raw sockets on every server (daphne too): a seeded
sample of requests (``Expect``, length or chunked, keep-alive or close, HTTP/1.0, a pipelined
second request, repeated headers, a body sent at once, slowly, never or cut short, other
methods, odd targets and query strings, a script prefix) gets the same status, refusal code
and ``Retry-After`` with the door as without, the pool idle or full, and leaves nothing held.
Where the door answers from the headers the difference is the one it promises (docs/door.md):
under ASGI ``Connection: close``, no pipelined request answered after it (daphne keeps the
connection: ``KEEPS``), and no ``100 Continue`` where the application's first ``receive()``
sends it (``OWN_CONTINUE``; hypercorn, daphne and the WSGI servers send it themselves)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import random
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from unittest.mock import ANY

import httpx
import pytest

from django_pdfpool.record import format_digest
from tests.e2e.test_door_servers import connect, form_head, port_of, settings
from tests.support.door import form, sha
from tests.support.servers import SERVED, serve, uvicorn, wait_for

KiB = 1024
PATIENCE = 15.0  # seconds an answer may take on a loaded machine: only "did not hang"
BASE = {"SLOTS": 1, "QUEUE": 0, "WAIT": 30, "MAX_UPLOAD_SIZE": 64 * KiB}
DOORS = {"on": {**BASE, "DOOR": {"BODY_TIMEOUT": 3, "BUDGET": 2}}, "off": {**BASE, "DOOR": False}}
ASGI = ("uvicorn", "hypercorn", "granian", "daphne")
OWN_CONTINUE = ("uvicorn", "granian")  # 100 Continue at the app's first receive(): the door's
KEEPS = ("daphne",)  # reads every body before the app, keeps a connection its request keeps
SERVERS = (*SERVED, "daphne")
PREFIXED = {  # a script prefix: the server's environment, and what a client puts before paths
    "uvicorn": ({"UVICORN_ROOT_PATH": "/p"}, ""),  # a proxy took it off
    "gunicorn-gthread": ({"SCRIPT_NAME": "/p"}, "/p"),
}
HOLDER = "127.200.0.1"  # the address whose upload holds the only slot of a full pool

PDF = b"%PDF-1.4\n" + b"m" * 300


OVER = b"%PDF-" + b"z" * 70 * KiB
BODIES = {  # each body, its Content-Type, and the file in it
    "raw": (PDF, "application/pdf", PDF),
    "form": (form(PDF), "multipart/form-data; boundary=b", PDF),
    "over": (OVER, "application/pdf", OVER),
    "empty": (b"", "application/pdf", b""),
    "text": (b"hello", "text/plain", b"hello"),
}
DIGESTS = {  # how many times the file's digest is declared, and whether it is the file's
    "none": (0, True),
    "true": (1, True),
    "lie": (1, False),  # another PDF's, not in flight
    "twice": (2, True),
}
CHOICES = {
    "method": ["POST"] * 6 + ["post", "PUT", "HEAD", "OPTIONS"],
    "target": ["{}/gated/"] * 4 + ["{}/gat%65d/", "http://test{}/gated/"],  # {}: the prefix
    "query": ["", "", "?a=1&a=2", "?x=%ff", "?x=\xff"],
    "version": ["1.1"] * 4 + ["1.0"],
    "body": list(BODIES),
    "chunked": [False, False, True],
    "expect": [False, True],
    "connection": ["", "", "keep-alive", "close"],
    "pipelined": [False, True],
    "twice": [False, False, False, True],  # Content-Type sent twice
    "digest": ["none", "none", "true", "lie", "twice"],
    "delivery": ["at-once", "at-once", "at-once", "slow", "never", "cut"],  # cut: half, gone
    "caller": ["", "", "", HOLDER],  # the holder's own address: one job per caller
}


@dataclass(frozen=True)
class Case:
    method: str = "POST"
    target: str = "{}/gated/"
    query: str = ""
    version: str = "1.1"
    body: str = "raw"
    chunked: bool = False
    expect: bool = False
    connection: str = ""
    pipelined: bool = False
    twice: bool = False
    digest: str = "none"
    delivery: str = "at-once"
    caller: str = ""

    @property
    def keeps(self) -> bool:
        """Whether it keeps its connection for a next request (its body sent)."""
        return self.version == "1.1" and self.connection != "close" and self.delivery != "never"

    @property
    def sent_chunked(self) -> bool:
        return self.chunked and self.version == "1.1"

    def request(self, prefix: str) -> tuple[bytes, bytes]:
        """Its head, and its body (with the pipelined request after it), under ``prefix``."""
        data, content_type, file = BODIES[self.body]
        target = self.target.format(prefix)
        lines = [f"{self.method} {target}{self.query} HTTP/{self.version}", "Host: test"]
        lines += ["Accept: application/json", f"Content-Type: {content_type}"]
        lines += [f"Content-Type: {content_type}"] if self.twice else []
        times, true = DIGESTS[self.digest]
        digest = format_digest(sha(file if true else b"not in flight"))
        name = "Pdf-Digest" if self.body == "form" else "Repr-Digest"
        lines += [f"{name}: {digest}"] * times
        lines += ["Expect: 100-continue"] if self.expect else []
        lines += [f"Connection: {self.connection}"] if self.connection else []
        if self.sent_chunked:
            lines.append("Transfer-Encoding: chunked")
            body = (b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + b"0\r\n\r\n"
        else:
            lines.append(f"Content-Length: {len(data)}")
            body = data
        after = probe(prefix) if self.pipelined else b""
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), body + after


def probe(prefix: str) -> bytes:
    """A request after the first one."""
    return b"GET %s/plain/ HTTP/1.1\r\nHost: test\r\n\r\n" % prefix.encode()


def sample(seed: int, count: int) -> list[Case]:
    """``count`` cases drawn from ``CHOICES``; a request pipelined only after one that keeps
    the connection (h11 answers more bytes after HTTP/1.0 or ``close`` with its own 400, at
    once) and whose body is sent."""
    rng = random.Random(seed)
    cases = [Case(**{k: rng.choice(v) for k, v in CHOICES.items()}) for _ in range(count)]
    return [replace(c, pipelined=c.pipelined and c.keeps) for c in cases]


@dataclass
class Seen:
    """What a client saw: each final answer's (status, refusal code, Retry-After sent?,
    Connection), a ``100 Continue`` or not, and whether the connection served another request."""

    answers: list[tuple[int, str | None, bool, str | None]] = field(default_factory=list)
    continued: bool = False
    kept: bool | None = None  # None: not asked (the body was not sent: a server may wait for it)


class Wire:
    """One client connection's bytes, read as HTTP/1.x answers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer, self.ended = sock, b"", False

    def fill(self, timeout: float) -> bool:
        if self.ended or not select.select([self.sock], [], [], max(timeout, 0))[0]:
            return False
        try:
            chunk = self.sock.recv(65536)
        except OSError:  # reset
            chunk = b""
        self.buffer += chunk
        self.ended = not chunk
        return bool(chunk)

    def until(self, mark: bytes, deadline: float) -> bytes | None:
        while mark not in self.buffer:
            if not self.fill(deadline - time.monotonic()):
                return None
        found, self.buffer = self.buffer.split(mark, 1)
        return found

    def take(self, size: int, deadline: float) -> bytes:
        while len(self.buffer) < size and self.fill(deadline - time.monotonic()):
            pass
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def answer(self, head_only: bool, deadline: float) -> tuple[int, dict[str, str], bytes] | None:
        top = self.until(b"\r\n\r\n", deadline)
        if top is None:
            return None
        status_line, *lines = top.decode("latin-1").split("\r\n")
        fields: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        status = int(status_line.split()[1])
        if head_only or status < 200 or status in (204, 304):
            return status, fields, b""
        if fields.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while size := int((self.until(b"\r\n", deadline) or b"0").split(b";")[0], 16):
                body += self.take(size + 2, deadline)[:size]
            self.until(b"\r\n", deadline)
            return status, fields, body
        if "content-length" in fields:
            return status, fields, self.take(int(fields["content-length"]), deadline)
        while self.fill(deadline - time.monotonic()):
            pass
        body, self.buffer = self.buffer, b""
        return status, fields, body


def code_of(body: bytes) -> str | None:
    with contextlib.suppress(ValueError, AttributeError):
        return json.loads(body).get("error")
    return None


def exchange(port: int, case: Case, address: str, delivery: str, prefix: str = "") -> Seen:
    """``case`` sent to the server on ``port`` from ``address``; with ``Expect``, the body
    waits for ``100 Continue`` or a second, as curl's does, and is not sent after an answer."""
    head, body = case.request(prefix)
    seen = Seen()
    deadline = time.monotonic() + PATIENCE
    with socket.create_connection(("127.0.0.1", port), PATIENCE, (address, 0)) as sock:
        wire = Wire(sock)
        sock.sendall(head)
        refused = False
        if case.expect and wire.fill(1.0):
            seen.continued = wire.buffer.startswith(b"HTTP/1.1 100 ")
            refused = not seen.continued
        with contextlib.suppress(OSError):
            if delivery == "at-once" and not refused:
                sock.sendall(body)
            elif delivery == "slow" and not refused:
                for at in range(0, len(body), max(len(body) // 3, 1)):
                    sock.sendall(body[at : at + max(len(body) // 3, 1)])
                    time.sleep(0.05)
            elif delivery == "cut":
                sock.sendall(body[: len(body) // 2])
                return seen  # the client is gone: what it holds must be given back
        methods = [case.method] + (["GET"] if case.pipelined else [])
        if delivery == "never":
            deadline = time.monotonic() + 1.5  # an answer from the headers comes at once
        while len(seen.answers) < len(methods):
            answer = wire.answer(methods[len(seen.answers)] == "HEAD", deadline)
            if answer is None:
                break
            status, fields, page = answer
            if status == 100:
                seen.continued = True
            if status >= 200:
                retry = "retry-after" in fields
                connection = fields.get("connection", "").lower() or None
                seen.answers.append((status, code_of(page), retry, connection))
        if delivery != "never" and not refused and len(seen.answers) == len(methods):
            with contextlib.suppress(OSError):
                sock.sendall(probe(prefix))  # is the connection kept for another request?
            seen.kept = wire.answer(False, time.monotonic() + PATIENCE) is not None
    return seen


def differs(server: str, case: Case, on: Seen, off: Seen) -> str | None:
    """What the door changed that it does not promise to, or None."""
    if case.delivery == "cut":
        return None  # nobody to answer: ``settled`` checks that nothing is held
    trusted = on.answers and on.answers[0][1] in ("busy", "caller_busy")
    if case.digest == "lie" and off.answers and off.answers[0][1] == "digest_mismatch" and trusted:
        return None  # the door trusts a digest: that upload cannot join (docs/door.md)
    if case.delivery == "never":  # off: the answer once the body is in; on: before it
        if not on.answers or on.answers[0][0] == 408:
            return None  # let in, the body never came (408 under ASGI: BODY_TIMEOUT)
        return None if on.answers[0][:3] == off.answers[0][:3] else "answered otherwise"
    if [a[:3] for a in on.answers[:1]] != [a[:3] for a in off.answers[:1]]:
        return "answered otherwise"
    closed = bool(on.answers) and "close" in (on.answers[0][3] or "")  # "close, keep-alive"
    if closed and server in ASGI and (on.answers, on.kept) != (off.answers, off.kept):
        kept = on.kept or len(on.answers) > 1
        if kept and server not in KEEPS:  # answered from the headers: the body unread
            return "kept the connection after an answer from the headers"
        if on.continued and server in OWN_CONTINUE and not case.sent_chunked:
            return "100 Continue before a refusal from the headers"  # a length: no 413 later
        return None
    if closed and on.continued < off.continued:  # no 100 Continue: refused from the headers
        return None
    if server in OWN_CONTINUE and on.continued != off.continued:
        return "100 Continue otherwise"
    asked = None not in (on.kept, off.kept)  # a body answered before it was sent: not asked
    same = on.answers == off.answers and (on.kept == off.kept or not asked)
    return None if same else "the connection otherwise"


@pytest.fixture(scope="module", params=SERVERS)
def pair(request, tmp_path_factory) -> Iterator[dict]:
    """The server with the door and without it, each with its own gate directory, and the
    script prefix clients send (``PREFIXED``)."""
    env, prefix = PREFIXED.get(request.param, ({}, ""))
    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(2) as threads:
        staged = {door: tmp_path_factory.mktemp(f"{request.param}-{door}") for door in DOORS}
        starting = {
            door: threads.submit(
                stack.enter_context,
                serve(request.param, pdfpool=DOORS[door], staged=staged[door], env=env),
            )
            for door in DOORS
        }
        servers = {door: started.result() for door, started in starting.items()}
        bases = {door: running.url + prefix for door, running in servers.items()}
        yield {"name": request.param, "servers": servers, "bases": bases, "staged": staged}
        for gate in staged.values():
            (gate / "open").touch()


@contextlib.contextmanager
def pool_state(pair: dict, full: bool) -> Iterator[None]:
    """Each pool idle (its gate open: a job ends at once), or full: its one slot held by an
    upload from ``HOLDER`` until the block ends."""
    bases, staged = pair["bases"], pair["staged"]
    for gate in staged.values():
        (gate / "open").unlink(missing_ok=True) if full else (gate / "open").touch()
    if not full:
        yield
        return
    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        held = []
        for base in bases.values():
            client = httpx.Client(transport=httpx.HTTPTransport(local_address=HOLDER), timeout=None)
            held.append(
                threads.submit(
                    client.post,
                    f"{base}/gated/",
                    content=form(b"%PDF- the holder"),
                    headers={"content-type": "multipart/form-data; boundary=b"},
                )
            )
        for base in bases.values():
            wait_for(lambda url=base: snapshot(url)["running"] == 1, PATIENCE)
        try:
            yield
        finally:
            for gate in staged.values():
                (gate / "open").touch()
            assert [h.result(PATIENCE).status_code for h in held] == [200, 200]


def snapshot(url: str) -> dict:
    return httpx.get(f"{url}/snapshot/", timeout=PATIENCE).json()


def settled(url: str, full: bool) -> bool:
    """No body held at the door, no job but the holder's."""
    found = snapshot(url)
    return found["running"] == int(full) and not found["door"]["held"]


COUNT = 4  # cases per server and pool state: the grid's seeded sample (CI's time)


@pytest.mark.parametrize("full", [False, True], ids=["idle", "full"])
def test_the_door_answers_over_the_wire_as_its_absence(pair, full):
    name, servers, bases = pair["name"], pair["servers"], pair["bases"]
    prefix = PREFIXED.get(name, ({}, ""))[1]
    if full and name == "gunicorn-sync":
        pytest.skip("gunicorn's sync workers: each its own pool, one request at a time")
    ports = {door: port_of(running.url) for door, running in servers.items()}
    found = []
    with pool_state(pair, full), concurrent.futures.ThreadPoolExecutor(2) as threads:
        for at, case in enumerate(sample(SERVERS.index(name) * 2 + full, COUNT)):
            if case.caller and not full:
                continue
            address = case.caller or f"127.{30 + at}.{int(full)}.1"
            off_delivery = "at-once" if case.delivery == "never" else case.delivery
            on = threads.submit(exchange, ports["on"], case, address, case.delivery, prefix)
            off = threads.submit(exchange, ports["off"], case, address, off_delivery, prefix)
            seen = {"on": on.result(), "off": off.result()}
            reason = differs(name, case, seen["on"], seen["off"])
            if reason:
                found.append((reason, case, asdict(seen["on"]), asdict(seen["off"])))
            for base in bases.values():
                wait_for(lambda url=base: settled(url, full), PATIENCE)
    assert not found, "\n".join(map(repr, found))


@pytest.mark.parametrize("door", [{}, False], ids=["door-on", "door-off"])
def test_under_asgi_without_pdfpooldoor_a_refusal_keeps_the_connection(tmp_path, door):
    """``AdmissionMiddleware`` alone under ASGI decides once Django's handler has read the
    whole body: nothing is left unread, so its 400 keeps the connection and the pipelined
    request after it is answered, as with the door off."""
    body = b"--b\r\n" + b"x" * 5000 + b"\r\n--b--\r\n"
    request = form_head("/gated/", len(body), pdf_digest="sha-256=nonsense") + body
    after = b"GET /plain/ HTTP/1.1\r\nHost: test\r\n\r\n"
    with (
        uvicorn("tests.project.asgi:application", pdfpool=settings(DOOR=door), staged=tmp_path)
        as server,
        connect(port_of(server.url)) as sock,
    ):  # fmt: skip
        sock.sendall(request + after)
        wire, deadline = Wire(sock), time.monotonic() + PATIENCE
        status, fields, answer = wire.answer(False, deadline) or (0, {}, b"")
        assert status == 400 and json.loads(answer)["error"] == "bad_digest"
        assert "connection" not in fields
        assert wire.answer(False, deadline) == (200, ANY, b'{"plain": true}')
