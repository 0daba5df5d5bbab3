"""Faults on a real uvicorn server: what happens to everyone else when something breaks.

- an extraction child killed with SIGKILL mid-job: its sharers get the documented error,
  the slot frees;
- a hostile PDF over MEMORY_LIMIT or TIMEOUT beside a normal job: only it fails;
- SIGTERM with jobs running and queued: they all finish, a request arriving during the
  drain gets 503 ``closed``, new connections are refused, the process exits, nothing left;
- the drain timeout: a job longer than it is stopped and the process still exits;
- a burst of 200 concurrent uploads against SLOTS=2, QUEUE=4: never more than 2 children at
  work (see ``Sampler`` for what an answered child still on its way out is), only
  200/503/429, and no temporary file, child, thread or job-loop task afterwards.

Servers run ``tests.project.fault_asgi:application`` (the test project plus ``/faults/state/``).
Bounds on time only say "did not hang"; they are generous for a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from django_pdfpool.exceptions import EXTRACTION_MESSAGES as MESSAGES
from tests.support import pdfs
from tests.support.pdfs import slow_pdf
from tests.support.procs import Sampler, extraction_children, rlimits
from tests.support.servers import Server, read_all_sent, uvicorn, wait_for

APP = "tests.project.fault_asgi:application"
ENV = {"DJANGO_SETTINGS_MODULE": "tests.project.fault_settings"}  # pytest-django set ours
MiB = 1 << 20
SLOTS, QUEUE = 2, 4
_SSL = ssl.create_default_context()  # one for every transport: building one costs ~15 ms


def settings(**values) -> dict:
    return {
        "SLOTS": SLOTS,
        "QUEUE": QUEUE,
        "WAIT": 30.0,
        "TIMEOUT": 30.0,
        "MEMORY_LIMIT": 256 * MiB,
        **values,
    }


def slowish(tag: str, kilobytes: int) -> bytes:
    """Like ``slow_pdf`` in finer steps: about a millisecond of pypdf work per kilobyte."""
    ops = (
        b"BT /F1 12 Tf (%s) Tj " % tag.encode()
        + b"1 0 0 1 72 720 Tm (a) Tj " * (kilobytes * 1024 // 25)
        + b"ET"
    )
    objects = pdfs.document([b""])
    objects[4] = pdfs.stream(zlib.compress(ops, 6), b"/Filter /FlateDecode ")
    return pdfs.assemble(objects)


def client(address: str, timeout: float = 60.0) -> httpx.AsyncClient:
    """A client whose connections come from ``address``: another anonymous caller."""
    transport = httpx.AsyncHTTPTransport(local_address=address, verify=_SSL)
    return httpx.AsyncClient(transport=transport, timeout=timeout)


async def upload(url: str, data: bytes, address: str) -> httpx.Response:
    async with client(address) as http:
        return await http.post(
            f"{url}/sync/",
            files={"file": ("doc.pdf", data, "application/pdf")},
            headers={"accept": "application/json"},
        )


async def get_json(url: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(url)
        response.raise_for_status()
        return response.json()


async def until(condition, timeout: float = 15.0, interval: float = 0.01):
    """Await ``condition()`` (sync or async) until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout} s")
        await asyncio.sleep(interval)


def working_child(pid: int) -> psutil.Process | None:
    """The server's extraction child once it is well into its job: limits set (so it has
    read the job and said "started") and 0.3 s of CPU spent parsing."""
    for child in extraction_children(pid):
        try:
            limited = rlimits(child.pid).get("Max address space", "unlimited") != "unlimited"
            times = child.cpu_times()
            if limited and times.user + times.system > 0.3:
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def still_alive(pids: set[int]) -> set[int]:
    """Of ``pids`` (extraction children seen earlier), those still alive as such."""
    alive = set()
    for pid in pids:
        try:
            if "django_pdfpool.sandbox.child_main" in " ".join(psutil.Process(pid).cmdline()):
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


async def quiet(server: Server, staged: Path) -> dict:
    """Wait until the server holds nothing of past jobs; return its fault state."""

    async def settled():
        state = await get_json(f"{server.url}/faults/state/")
        pool = state["pool"] or {"running": 0, "queued": 0}
        idle = (
            pool["running"] == 0
            and pool["queued"] == 0
            and state["tasks"] == 0
            and state["extract_threads"] == 0
            and state["unreaped_children"] == len(state["idle"])
            and not set(extraction_children(server.pid)) - _idle(state)
            and not list(staged.iterdir())
        )
        return state if idle else None

    return await until(settled, timeout=20, interval=0.05)


def _idle(state: dict) -> set[psutil.Process]:
    return {psutil.Process(pid) for pid in state["idle"] if psutil.pid_exists(pid)}


def assert_refusal(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code
    assert set(body) <= {"error", "message", "retry_after"}


# --- one server for the child faults and the cold burst ---------------------------------


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("staged")


@pytest.fixture(scope="module")
def server(staged):
    with uvicorn(APP, pdfpool=settings(), staged=staged, env=ENV) as running:
        yield running


def test_a_child_killed_mid_job_fails_its_sharers_and_frees_the_slot(server, staged):
    """A SIGKILL we did not send reads as the kernel's OOM killer: 422 ``too_large``, with
    the fixed user-safe sentence, to the starter and the sharer alike."""
    data = slow_pdf("killed", megabytes=3)  # about 3.5 s of work: killed well before its end
    before = asyncio.run(get_json(f"{server.url}/snapshot/"))["counters"]

    async def scenario():
        starter = asyncio.create_task(upload(server.url, data, "127.0.10.1"))
        child = await until(lambda: working_child(server.pid))
        sharer = asyncio.create_task(upload(server.url, data, "127.0.10.2"))

        async def shared():
            jobs = (await get_json(f"{server.url}/snapshot/"))["jobs"]
            return len(jobs) == 1 and jobs[0]["sharers"] == 2

        await until(shared)
        assert child.is_running()  # still mid-job: the sharer joined a live child
        child.send_signal(signal.SIGKILL)
        answers = await asyncio.gather(starter, sharer)
        snapshot = await get_json(f"{server.url}/snapshot/")
        started = time.monotonic()
        after = await upload(server.url, pdfs.simple(["after the kill"]), "127.0.10.3")
        return child.pid, answers, snapshot, after, time.monotonic() - started

    killed, answers, snapshot, after, took = asyncio.run(scenario())
    for response in answers:
        assert_refusal(response, 422, "too_large")
        assert response.json()["message"] == MESSAGES["too_large"]
    assert (snapshot["running"], snapshot["queued"]) == (0, 0)  # the slot is free again
    assert after.status_code == 200 and "after the kill" in after.json()["pdf"]["text"]
    assert took < 10  # it ran at once, not after some timeout
    counters = asyncio.run(get_json(f"{server.url}/snapshot/"))["counters"]
    assert counters["started"] - before["started"] == 2
    assert counters["failed"] - before["failed"] == 1
    assert counters["joined"] - before["joined"] == 1
    assert still_alive({killed}) == set()
    asyncio.run(quiet(server, staged))


def test_a_flate_bomb_over_the_memory_limit_fails_alone_beside_a_running_job(server, staged):
    """MEMORY_LIMIT 256 MiB: the bomb gets 422 ``too_large``, its neighbour its text."""
    normal, bomb = slow_pdf("neighbour-memory", megabytes=2), pdfs.flate_bomb()

    async def scenario():
        neighbour = asyncio.create_task(upload(server.url, normal, "127.0.11.1"))
        await until(lambda: working_child(server.pid))  # seconds of work still ahead of it
        refused = await upload(server.url, bomb, "127.0.11.2")
        return refused, await neighbour

    with Sampler(server.pid) as sampler:
        refused, neighbour = asyncio.run(scenario())
    assert_refusal(refused, 422, "too_large")
    assert refused.json()["message"] == MESSAGES["too_large"]
    assert neighbour.status_code == 200, neighbour.text
    assert "neighbour-memory" in neighbour.json()["pdf"]["text"]
    assert sampler.peak == 2  # the two ran side by side
    asyncio.run(quiet(server, staged))


def test_a_pdf_over_the_timeout_fails_alone_while_another_job_runs_beside_it(tmp_path):
    """TIMEOUT 4 s: seconds of text operators get 422 ``too_complex``; a short job started
    while it runs (so wholly beside it) gets its text. The bomb's parse also grows to about
    300 MB, so the memory limit is raised here: only time may end it (with 256 MiB, a fast
    interpreter reached the memory limit first: ``too_large``)."""
    staged = tmp_path / "staged"
    staged.mkdir()
    normal, bomb = slowish("neighbour-time", kilobytes=200), pdfs.cpu_bomb()
    limits = settings(TIMEOUT=4.0, MEMORY_LIMIT=1024 * MiB)
    with uvicorn(APP, pdfpool=limits, staged=staged, env=ENV) as server:

        async def scenario():
            refused = asyncio.create_task(upload(server.url, bomb, "127.0.11.3"))
            await until(lambda: working_child(server.pid))
            neighbour = await upload(server.url, normal, "127.0.11.4")
            assert not refused.done()  # the neighbour ran (and ended) beside the bomb
            return await refused, neighbour

        with Sampler(server.pid) as sampler:
            refused, neighbour = asyncio.run(scenario())
        assert_refusal(refused, 422, "too_complex")
        assert refused.json()["message"] == MESSAGES["too_complex"]
        assert neighbour.status_code == 200, neighbour.text
        assert "neighbour-time" in neighbour.json()["pdf"]["text"]
        assert sampler.peak == 2
        asyncio.run(quiet(server, staged))


async def burst(url: str, documents: list[bytes], addresses: list[str]) -> list[int]:
    """Every upload at once, document ``i % len(documents)`` from ``addresses[i]``."""
    clients = {address: client(address) for address in set(addresses)}

    async def one(i: int) -> int:
        response = await clients[addresses[i]].post(
            f"{url}/sync/",
            files={"file": ("doc.pdf", documents[i % len(documents)], "application/pdf")},
            headers={"accept": "application/json"},
        )
        return response.status_code

    try:
        return await asyncio.gather(*(one(i) for i in range(len(addresses))))
    finally:
        await asyncio.gather(*(http.aclose() for http in clients.values()))


def burst_addresses(prefix: str, uploads: int = 200, repeated: int = 20) -> list[str]:
    """``uploads`` source addresses, the last ``repeated`` reusing earlier ones (same callers)."""
    distinct = [f"{prefix}.{i // 250}.{i % 250 + 1}" for i in range(uploads - repeated)]
    return distinct + distinct[:repeated]


def check_burst(server: Server, staged: Path, prefix: str, limit: int) -> None:
    documents = [slowish(f"burst-{i}", kilobytes=250) for i in range(12)]
    addresses = burst_addresses(prefix)
    started = asyncio.run(get_json(f"{server.url}/snapshot/"))
    before, before_door = started["counters"], started["door"]
    with Sampler(server.pid) as sampler:
        statuses = asyncio.run(burst(server.url, documents, addresses))
    assert set(statuses) <= {200, 503, 429}, sorted(set(statuses))
    assert statuses.count(200) >= SLOTS and statuses.count(503) > 0  # the pool was saturated
    assert sampler.peak <= limit, f"{sampler.peak} at work, {sampler.peak_all} processes"
    state = asyncio.run(quiet(server, staged))
    counters = state["pool"]["counters"]
    admitted = sum(
        counters[name] - before[name]
        for name in ("started", "joined", "refused_busy", "refused_caller")
    )
    shed = state["door"]["shed"] - before_door["shed"]  # past the door budget, counted apart
    assert admitted + shed == len(addresses)  # every upload answered by the pool's rules


def test_a_burst_of_200_uploads_never_exceeds_the_slots(server, staged):
    check_burst(server, staged, "127.1", limit=SLOTS)


def test_a_burst_with_a_warm_spare_never_exceeds_the_slots_plus_the_spare(tmp_path):
    """With a warm template the one spare (idle, or starting up to replace a taken one) is a
    child too: the bound is SLOTS + 1."""
    staged = tmp_path / "staged"
    staged.mkdir()
    with uvicorn(APP, pdfpool=settings(), staged=staged, warm=True, env=ENV) as server:
        check_burst(server, staged, "127.2", limit=SLOTS + 1)


# --- shutdown: a server of its own each ---------------------------------------------------


def listening(pid: int) -> bool:
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    return any(s.status == psutil.CONN_LISTEN for s in sockets)


async def held_upload(
    url: str, data: bytes, address: str, go: asyncio.Event, sent: asyncio.Event,
    path: str = "/sync/",
) -> tuple[int, Any]:  # fmt: skip
    """POST to ``path`` whose body stops half way until ``go`` is set: the request is in
    flight (its headers are in) but reaches the view only after the rest arrives. ``sent`` is
    set once the headers and the first half are written. The status, and the JSON answered."""
    host, port = url.removeprefix("http://").split(":")
    boundary = "pdfpool-fault-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="late.pdf"\r\nContent-Type: application/pdf\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(address, 0))
    try:
        writer.write(head + body[: len(body) // 2])
        await writer.drain()
        sent.set()
        await go.wait()
        writer.write(body[len(body) // 2 :])
        await writer.drain()
        response = await reader.read()  # the server closes: it is shutting down
    finally:
        writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), json.loads(payload) if payload[:1] == b"{" else payload


def test_sigterm_finishes_running_and_queued_jobs_and_refuses_what_comes_later(tmp_path):
    """Two jobs running, two queued, and a late upload whose headers are in but whose body
    is not when SIGTERM comes. uvicorn closes its listener (a new connection fails) and
    waits for the open requests: the four finish with their text; the late one reaches the
    view after the signal and gets 503 ``closed``, because PoolLifespan closed the pool at
    the signal (without that it would join the queue and get 200)."""
    staged = tmp_path / "staged"
    staged.mkdir()
    with uvicorn(APP, pdfpool=settings(), staged=staged, env=ENV) as server:
        # two running (about 2.4 s each), two queued behind them (about 1.1 s each)
        documents = [slow_pdf(f"drain-{i}", megabytes=2 if i < 2 else 1) for i in range(4)]
        go, sent = asyncio.Event(), asyncio.Event()
        port = int(server.url.rsplit(":", 1)[1])

        async def scenario():
            jobs = []
            for i, data in enumerate(documents):
                jobs.append(asyncio.create_task(upload(server.url, data, f"127.0.12.{i + 1}")))
                await until(lambda n=i + 1: in_flight(server, n))  # admitted in this order
            snapshot = await get_json(f"{server.url}/snapshot/")
            assert (snapshot["running"], snapshot["queued"]) == (2, 2)
            late = asyncio.create_task(
                held_upload(server.url, pdfs.simple(["late"]), "127.0.12.9", go, sent)
            )
            # the server has read the late request's headers (and half its body): the
            # request is in flight, which uvicorn waits for at shutdown
            await until(lambda: sent.is_set() and read_all_sent(server.pid, port, "127.0.12.9"))
            server.process.send_signal(signal.SIGTERM)
            await until(lambda: not listening(server.pid))
            with pytest.raises(httpx.ConnectError):  # the listener is closed
                await upload(server.url, pdfs.simple(["new"]), "127.0.12.10")
            go.set()
            return await asyncio.gather(*jobs), await late

        with Sampler(server.pid) as sampler:  # every job has answered when it returns
            answers, (late_status, late_body) = asyncio.run(scenario())
        returncode = server.process.wait(timeout=60)
        for i, response in enumerate(answers):
            assert response.status_code == 200, response.text
            assert f"drain-{i}" in response.json()["pdf"]["text"]
        assert late_status == 503 and late_body["error"] == "closed"
        assert sampler.peak == 2 and len(sampler.pids) == 4
        log = server.text()
    # uvicorn (>= 0.29) re-raises the signal with the default handler once its graceful
    # shutdown is complete: the exit status of a clean stop is "terminated by SIGTERM"
    assert returncode == -signal.SIGTERM, log
    assert "Application shutdown complete" in log and "Finished server process" in log
    assert "Traceback" not in log
    assert still_alive(sampler.pids) == set()
    assert list(staged.iterdir()) == []


async def in_flight(server: Server, count: int) -> bool:
    snapshot = await get_json(f"{server.url}/snapshot/")
    return snapshot["running"] + snapshot["queued"] == count


def test_the_drain_timeout_stops_a_job_left_running_and_the_process_exits(tmp_path):
    """A job every client left (it runs on, by design) and longer than the drain timeout:
    the shutdown stops it (its child is killed) instead of waiting for it."""
    staged = tmp_path / "staged"
    staged.mkdir()
    pool = settings(TIMEOUT=60.0, MEMORY_LIMIT=512 * MiB)
    with uvicorn(
        APP, pdfpool=pool, staged=staged, env={**ENV, "FAULTS_DRAIN_TIMEOUT": "0.5"}
    ) as server:

        async def scenario():
            left = asyncio.create_task(upload(server.url, pdfs.cpu_bomb(), "127.0.13.1"))
            child = await until(lambda: working_child(server.pid))
            left.cancel()  # the client goes; its job stays
            with pytest.raises(asyncio.CancelledError):
                await left
            return child

        child = asyncio.run(scenario())
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        try:
            returncode = server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not exit after its drain timeout")
        took = time.monotonic() - started
        log = server.text()
    assert returncode == -signal.SIGTERM, log
    assert "drain timed out" in log
    assert took < 20  # not the job's 60 s
    assert still_alive({child.pid}) == set()
    assert list(staged.iterdir()) == []


def test_a_second_ctrl_c_leaves_the_exit_drain_saying_what_it_waits_for(tmp_path):
    """A second Ctrl-C makes uvicorn skip ``lifespan.shutdown``: the atexit drain then waits
    for the job left running, and says so once (WARNING), with how long at most."""
    staged = tmp_path / "staged"
    staged.mkdir()
    with uvicorn(APP, pdfpool=settings(), staged=staged, env=ENV) as server:

        async def scenario():
            request = asyncio.create_task(
                upload(server.url, slow_pdf("forced", megabytes=4), "127.0.14.1")
            )
            child = await until(lambda: working_child(server.pid))
            server.process.send_signal(signal.SIGINT)
            await until(lambda: "Waiting for connections to close" in server.text())
            server.process.send_signal(signal.SIGINT)  # uvicorn: "CTRL+C to force quit"
            with contextlib.suppress(httpx.HTTPError):  # cut, or uvicorn's 500 for a cancelled app
                await request
            return child

        child = asyncio.run(scenario())
        waiting = "PDF pool: waiting at most 65 s for the jobs in flight to end"
        wait_for(lambda: waiting in server.text() or server.process.poll() is not None, 30)
        log = server.text()
        assert waiting in log, log
        assert still_alive({child.pid}) == {child.pid}  # said while the job still runs
        server.process.wait(timeout=60)
        log = server.text()
    assert "Application shutdown complete" not in log  # the lifespan's drain never ran
    assert log.count(waiting) == 1, log
    assert "drain timed out" not in log
    assert still_alive({child.pid}) == set()
    assert list(staged.iterdir()) == []


# --- PoolLifespan's signal chaining, in process ------------------------------------------


class FakePool:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


async def lifespan(app, between) -> None:
    """Run ``app``'s lifespan: startup, then ``between()``, then shutdown."""
    inbox: asyncio.Queue = asyncio.Queue()
    sent: list[str] = []

    async def send(message: dict) -> None:
        sent.append(message["type"])

    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan"}, inbox.get, send))
    await until(lambda: sent == ["lifespan.startup.complete"], timeout=5)
    await between()
    await inbox.put({"type": "lifespan.shutdown"})
    await task
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


@pytest.fixture
def stop_signals():
    """A recording handler for SIGTERM and SIGINT, as a server would install; the test
    process's own handlers come back afterwards."""
    calls: list[int] = []

    def server_handler(signum, frame):
        calls.append(signum)

    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    for number in saved:
        signal.signal(number, server_handler)
    yield server_handler, calls
    for number, handler in saved.items():
        signal.signal(number, handler)


def test_pool_lifespan_closes_the_pool_at_a_stop_signal_then_calls_the_servers_handler(
    monkeypatch, stop_signals
):
    import django_pdfpool.asgi as asgi

    server_handler, calls = stop_signals
    pool, drained = FakePool(), []
    monkeypatch.setattr(asgi, "peek_pool", lambda: pool)

    async def fake_drain(timeout):
        drained.append(timeout)
        return True

    monkeypatch.setattr(asgi, "adrain_pool", fake_drain)

    async def between():
        for number in (signal.SIGTERM, signal.SIGINT):
            ours = signal.getsignal(number)
            assert ours is not server_handler
            ours(number, None)  # as the interpreter would, between two bytecodes
        assert calls == [signal.SIGTERM, signal.SIGINT]  # the server's handler still runs
        await until(lambda: pool.closed == 2, timeout=5)  # closed on the loop, not in the handler

    asyncio.run(lifespan(asgi.PoolLifespan(None, drain_timeout=3.0), between))
    assert drained == [3.0]
    assert signal.getsignal(signal.SIGTERM) is server_handler  # put back at shutdown
    assert signal.getsignal(signal.SIGINT) is server_handler


def test_pool_lifespan_leaves_the_signals_alone_when_told(monkeypatch, stop_signals):
    import django_pdfpool.asgi as asgi

    server_handler, _ = stop_signals

    async def fake_drain(timeout):
        return True

    monkeypatch.setattr(asgi, "adrain_pool", fake_drain)

    async def between():
        assert signal.getsignal(signal.SIGTERM) is server_handler

    asyncio.run(lifespan(asgi.PoolLifespan(None, close_on_signal=False), between))
