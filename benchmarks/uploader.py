"""The load benchmarks' clients (bench_load.py, soak.py): uploads sent as curl sends them
with ``Expect: 100-continue``: the headers, then ``100 Continue`` awaited (then the body)
or a final answer (then nothing), or the body anyway after ``expect_timeout`` seconds
(curl: 1 s). One connection per upload (as one curl command opens), from a chosen local
address; HTTP/1.1 framing is h11's. Each upload's body bytes on the wire are counted, so
that what a server read of a refused upload is measured, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11

from benchmarks.loadkit import BOUNDARY, Mix, sha256_of_form

EXPECT_TIMEOUT = 1.0  # curl's default --expect100-timeout
READ = 1 << 16
REFUSED = (429, 503)
BURST, BURST_ADDRESSES = 200, 100


@dataclass
class Answer:
    """One upload's outcome, as its client saw it."""

    status: int | str  # the final HTTP status, or the name of a transport error
    headers: dict[str, str]  # the final answer's headers, lower-case names
    content: bytes
    continued: bool  # the server sent "100 Continue" (it asked for the body)
    timed_out: bool  # no answer within expect_timeout: the body was sent anyway
    sent: int  # body bytes written to the socket
    latency: float  # seconds from sending the headers (or connecting) to the whole answer
    connect: float = 0.0  # of which connecting (0 with a barrier: connected before)


class _Exchange:
    """One request/response over an asyncio stream, framed by h11."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h11.Connection(h11.CLIENT)

    async def write(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next_event(self) -> h11.Event:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            self.conn.receive_data(await self.reader.read(READ))


async def connect(host: str, port: int, local: str | None) -> _Exchange:
    """A connection to ``host:port`` from the local address ``local`` (any port)."""
    local_addr = None if local is None else (local, 0)
    reader, writer = await asyncio.open_connection(host, port, local_addr=local_addr)
    return _Exchange(reader, writer)


async def upload(
    host: str,
    port: int,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes,
    *,
    local: str | None = None,
    ready: asyncio.Barrier | None = None,
    expect_timeout: float = EXPECT_TIMEOUT,
) -> Answer:
    """POST ``body`` to ``target`` with ``Expect: 100-continue``. With ``ready``, connect
    first, then wait at the barrier and send the headers once every party is there (a
    burst), timing from then; otherwise the time includes connecting. Transport errors are
    answered, not raised."""
    began = time.perf_counter()
    continued = timed_out = False
    sent, connecting = 0, 0.0
    exchange: _Exchange | None = None
    try:
        try:
            exchange = await connect(host, port, local)
            connecting = time.perf_counter() - began
        finally:  # connected or not, this party arrives at the barrier
            if ready is not None:
                await ready.wait()
                began, connecting = time.perf_counter(), 0.0
        request = h11.Request(
            method="POST",
            target=target,
            headers=[
                ("Host", f"{host}:{port}"),
                ("Content-Length", str(len(body))),
                ("Expect", "100-continue"),
                *headers,
            ],
        )
        await exchange.write(request)
        try:
            event = await asyncio.wait_for(exchange.next_event(), expect_timeout)
        except TimeoutError:
            event, timed_out = None, True
        if isinstance(event, h11.InformationalResponse) or event is None:
            continued = event is not None and event.status_code == 100
            await exchange.write(h11.Data(data=body))
            sent = len(body)
            await exchange.write(h11.EndOfMessage())
            event = await exchange.next_event()
            while isinstance(event, h11.InformationalResponse):  # a late 100 after timing out
                continued = continued or event.status_code == 100
                event = await exchange.next_event()
        if not isinstance(event, h11.Response):
            raise ConnectionError(f"no answer but {type(event).__name__}")
        content = bytearray()
        while True:
            part = await exchange.next_event()
            if isinstance(part, h11.Data):
                content += part.data
            elif isinstance(part, h11.EndOfMessage | h11.ConnectionClosed):
                break
        found = {name.decode().lower(): value.decode("latin-1") for name, value in event.headers}
        status: int | str = event.status_code
        return Answer(
            status,
            found,
            bytes(content),
            continued,
            timed_out,
            sent,
            time.perf_counter() - began,
            connecting,
        )
    except (OSError, h11.ProtocolError, ConnectionError) as error:
        elapsed = time.perf_counter() - began
        return Answer(type(error).__name__, {}, b"", continued, timed_out, sent, elapsed)
    finally:
        if exchange is not None:
            exchange.writer.close()


# --- the benchmark's clients --------------------------------------------------------------


@dataclass
class Record:
    kind: str  # identical / distinct
    status: int | str  # an HTTP status, or the name of a transport error
    code: str  # the answer's error code, "" for a 200
    latency: float  # seconds
    sent: int  # body bytes the client sent (after 100 Continue, or curl's 1 s)
    asked: bool | None  # the server asked for the body before answering (None: not told)
    read: int | None  # body bytes the server's application had read when it answered
    app_ms: float | None  # of the latency, the ms from the application's start to its answer
    connect_ms: float  # of the latency, the ms to connect
    ended: float = 0.0  # time.time() when the answer was whole
    retry_after: float | None = None  # the answer's Retry-After, seconds

    @property
    def before_body(self) -> bool:
        """Answered before the server asked for a body byte (the door's refusals)."""
        return not self.asked if self.asked is not None else self.sent == 0


async def post(
    url: str,
    kind: str,
    body: bytes,
    declare: bool,
    local: str | None = None,
    ready: asyncio.Barrier | None = None,
) -> Record:
    """One upload as curl would send it; its outcome as a Record."""
    parts = urlsplit(url)
    headers = [
        ("Content-Type", f"multipart/form-data; boundary={BOUNDARY}"),
        ("Accept", "application/json"),
        ("X-Requested-With", "bench"),  # the example's API refuses POSTs without it
    ]
    if declare:
        from django_pdfpool.record import format_digest

        headers.append(("Pdf-Digest", format_digest(sha256_of_form(body))))
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    answer = await upload(host, port, parts.path, headers, body, local=local, ready=ready)
    code = ""
    if answer.status != 200 and answer.content.startswith(b"{"):
        code = json.loads(answer.content).get("error", "")
    asked = answer.headers.get("bench-asked-body")
    read = answer.headers.get("bench-body-read")
    app_ms = answer.headers.get("bench-app-ms")
    return Record(
        kind,
        answer.status,
        code,
        answer.latency,
        answer.sent,
        None if asked is None else asked == "1",
        None if read is None else int(read),
        None if app_ms is None else float(app_ms),
        answer.connect * 1000,
        time.time(),
        float(answer.headers["retry-after"]) if "retry-after" in answer.headers else None,
    )


async def client_loop(
    url: str, mix: Mix, rng: random.Random, end: float, pause: float, out: list[Record], **kw: Any
) -> None:
    """One client: post, record, and again until ``end`` (a refusal: after ``pause``)."""
    while time.monotonic() < end:
        kind, _, body = mix.pick(rng)
        out.append(record := await post(url, kind, body, **kw))
        if record.status in REFUSED:
            await asyncio.sleep(pause)


def address(i: int, block: int = 100) -> str:
    return f"127.0.{block + i // 250}.{i % 250 + 1}"


async def offer_load(
    url: str,
    mix: Mix,
    clients: int,
    start: float,
    seconds: float,
    pause: float,
    declare: bool = False,
) -> tuple[list[Record], float]:
    """C clients, each from its own loopback address, from wall time ``start``."""
    records: list[Record] = []
    await asyncio.sleep(max(0.0, start - time.time()))
    began = time.monotonic()
    end = began + seconds
    await asyncio.gather(
        *(
            client_loop(url, mix, random.Random(i), end, pause, records, declare=declare, local=a)
            for i, a in enumerate(address(i) for i in range(clients))
        )
    )
    return records, time.monotonic() - began


async def burst(url: str, mix: Mix, declare: bool) -> tuple[list[Record], float]:
    """BURST uploads from BURST_ADDRESSES addresses: all connected, then sent at once."""
    rng, ready = random.Random(4242), asyncio.Barrier(BURST + 1)
    bodies = [mix.pick(rng) for _ in range(BURST)]
    tasks = [
        asyncio.create_task(
            post(url, kind, body, declare, address(i % BURST_ADDRESSES, 200), ready)
        )
        for i, (kind, _, body) in enumerate(bodies)
    ]
    await asyncio.wait_for(ready.wait(), 60)  # every connection made (or failed)
    began = time.monotonic()
    records = await asyncio.gather(*tasks)
    return records, time.monotonic() - began
