"""The load benchmark's clients: uploads sent as curl sends them with ``Expect: 100-continue``
(the body after ``100 Continue``, or after 1 s without an answer), one connection each, from a
chosen local address, framed by h11; the body bytes sent are counted, not assumed.
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
REFUSED = (429, 503)
BURST, BURST_ADDRESSES = 200, 100


@dataclass
class Record:
    """One upload's outcome, as its client saw it."""

    kind: str  # identical / distinct
    status: int | str  # an HTTP status, or the name of a transport error
    code: str  # the answer's error code, "" for a 200
    latency: float  # seconds from sending the headers (or connecting) to the whole answer
    sent: int  # body bytes the client sent (after 100 Continue, or curl's 1 s)
    asked: bool | None  # the server asked for the body before answering (None: not told)
    read: int | None  # body bytes the server's application had read when it answered
    ended: float  # time.time() when the answer was whole
    retry_after: float | None  # the answer's Retry-After, seconds

    @property
    def before_body(self) -> bool:
        """Answered before the server asked for a body byte (the door's refusals)."""
        return not self.asked if self.asked is not None else self.sent == 0


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event  # type: ignore[return-value]
        conn.receive_data(await reader.read(1 << 16))


async def post(
    url: str,
    kind: str,
    body: bytes,
    declare: bool,
    local: str | None = None,
    ready: asyncio.Barrier | None = None,
) -> Record:
    """One upload as curl would send it. With ``ready``, connect first, then wait at the
    barrier (a burst), timing from then. Transport errors are recorded, not raised."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    headers = [
        ("Host", f"{host}:{port}"),
        ("Content-Length", str(len(body))),
        ("Expect", "100-continue"),
        ("Content-Type", f"multipart/form-data; boundary={BOUNDARY}"),
        ("Accept", "application/json"),
        ("X-Requested-With", "bench"),  # the example's API refuses POSTs without it
    ]
    if declare:
        from django_pdfpool.record import format_digest

        headers.append(("Pdf-Digest", format_digest(sha256_of_form(body))))
    began, sent, writer = time.perf_counter(), 0, None
    conn = h11.Connection(h11.CLIENT)

    async def write(event: h11.Event) -> None:
        assert writer is not None
        writer.write(conn.send(event) or b"")
        await writer.drain()

    try:
        try:
            local_addr = None if local is None else (local, 0)
            reader, writer = await asyncio.open_connection(host, port, local_addr=local_addr)
        finally:  # connected or not, this party arrives at the barrier
            if ready is not None:
                await ready.wait()
                began = time.perf_counter()
        await write(h11.Request(method="POST", target=parts.path, headers=headers))
        try:
            event: h11.Event | None = await asyncio.wait_for(_next(conn, reader), EXPECT_TIMEOUT)
        except TimeoutError:
            event = None
        if event is None or isinstance(event, h11.InformationalResponse):
            await write(h11.Data(data=body))
            sent = len(body)
            await write(h11.EndOfMessage())
            event = await _next(conn, reader)
            while isinstance(event, h11.InformationalResponse):  # a late 100 after timing out
                event = await _next(conn, reader)
        if not isinstance(event, h11.Response):
            raise ConnectionError(f"no answer but {type(event).__name__}")
        content = bytearray()
        while isinstance(part := await _next(conn, reader), h11.Data):
            content += part.data
        found = {name.decode().lower(): value.decode("latin-1") for name, value in event.headers}
    except (OSError, h11.ProtocolError, ConnectionError) as error:
        latency = time.perf_counter() - began
        return Record(kind, type(error).__name__, "", latency, sent, None, None, time.time(), None)
    finally:
        if writer is not None:
            writer.close()
    code = ""
    if event.status_code != 200 and content.startswith(b"{"):
        code = json.loads(content).get("error", "")
    asked, read = found.get("bench-asked-body"), found.get("bench-body-read")
    return Record(
        kind,
        event.status_code,
        code,
        time.perf_counter() - began,
        sent,
        None if asked is None else asked == "1",
        None if read is None else int(read),
        time.time(),
        float(found["retry-after"]) if "retry-after" in found else None,
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
    """Client ``i``'s address, a /24 of its own: the door counts anonymous callers by network."""
    return f"127.{block}.{i % 250}.{i // 250 + 1}"


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
