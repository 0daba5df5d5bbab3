"""The door's logic written once and run on a thread (``run_steps``) or an event
loop (``arun_steps``). Each runner does only its own side of each call, sends the value back,
and raises a call's exception (a cancel too) inside the step function where it yielded,
so that its ``except`` and ``finally`` (the ticket given back) run on both paths."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import pytest

from django_pdfpool.door import Call, Steps, arun_steps, run_steps


class Boom(Exception):
    pass


def _sync_side(log: list[str], value: int) -> int:
    log.append("sync")
    return value


async def _async_side(log: list[str], value: int) -> int:
    await asyncio.sleep(0)  # really suspends: arun_steps awaits it on the loop
    log.append("async")
    return value


def adding(log: list[str]) -> Steps[int]:
    total = 0
    for value in (1, 2, 3):
        total += yield Call(lambda v=value: _sync_side(log, v), lambda v=value: _async_side(log, v))
    return total


def test_each_runner_does_its_own_side_and_sends_the_values_back():
    log: list[str] = []
    assert run_steps(adding(log)) == 6
    assert log == ["sync"] * 3
    log.clear()
    assert asyncio.run(arun_steps(adding(log))) == 6
    assert log == ["async"] * 3


def _raising() -> int:
    raise Boom("from the call")


async def _araising() -> int:
    raise Boom("from the call")


def catching(seen: list[str]) -> Steps[str]:
    try:
        yield Call(_raising, _araising)
    except Boom as error:
        seen.append(str(error))
        return "caught where it yielded"
    return "not raised"


def test_a_calls_exception_is_raised_inside_the_step_function_on_both_paths():
    seen: list[str] = []
    assert run_steps(catching(seen)) == "caught where it yielded"
    assert asyncio.run(arun_steps(catching(seen))) == "caught where it yielded"
    assert seen == ["from the call", "from the call"]


def releasing(released: list[object], call: Call[object]) -> Steps[object]:
    """Gives its place back whatever happens, and notes what ended it (None: a value)."""
    try:
        value = yield call
    except BaseException as error:  # the call's own exception, not a GeneratorExit later
        released.append(type(error))
        raise
    released.append(None)
    return value


def test_an_uncaught_exception_propagates_after_the_step_functions_finally():
    released: list[object] = []
    with pytest.raises(Boom):
        run_steps(releasing(released, Call(_raising, _araising)))
    with pytest.raises(Boom):
        asyncio.run(arun_steps(releasing(released, Call(_raising, _araising))))
    assert released == [Boom, Boom]


def test_a_cancel_while_awaiting_runs_the_step_functions_finally_then_cancels():
    released: list[object] = []

    async def main() -> None:
        waiting = asyncio.Event()

        async def forever() -> object:
            waiting.set()
            await asyncio.Event().wait()

        task = asyncio.ensure_future(arun_steps(releasing(released, Call(object, forever))))
        await asyncio.wait_for(waiting.wait(), 30)
        assert released == []
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert released == [asyncio.CancelledError]


def test_a_blocking_call_runs_off_the_loop():
    def thread() -> int | None:
        return threading.get_ident()

    async def main() -> tuple[object, int]:
        return await arun_steps(iter_once(Call.blocking(thread))), threading.get_ident()

    blocking, loop_thread = asyncio.run(main())
    assert blocking != loop_thread
    assert run_steps(iter_once(Call.blocking(thread))) == threading.get_ident()  # sync: right here


def iter_once(call: Call[object]) -> Steps[object]:
    return (yield call)


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_door_knows_the_signed_in_user_as_under_wsgi(pdfpool, settings):
    """``AdmissionMiddleware`` on an event loop (Django's AsyncClient) runs the same steps as
    on a thread: the user is resolved before the caller is asked (on the loop, a lazy user
    cannot be read), so the user's second PDF from another address gets the pool's 429 from
    its headers, its body never parsed (tests/test_middleware.py has the WSGI side)."""
    from django.conf import global_settings
    from django.contrib.auth.models import User
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import AsyncClient, Client

    from django_pdfpool import get_pool
    from django_pdfpool.record import format_digest
    from tests.conftest import held_requests, wait_until
    from tests.project.views import PARSED

    pdfpool(SLOTS=2, QUEUE=0)
    settings.FILE_UPLOAD_HANDLERS = [
        "tests.project.views.RecordingUploadHandler",
        *global_settings.FILE_UPLOAD_HANDLERS,
    ]
    user = User.objects.create_user("door-async", password="pw")
    gate = Path(pdfpool.staged) / "open"
    json = {"HTTP_ACCEPT": "application/json"}

    def upload(data: bytes) -> dict:
        return {"file": SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")}

    held = Client(REMOTE_ADDR="10.6.0.1")
    held.force_login(user)
    with held_requests(1) as threads:
        try:
            first = threads.submit(held.post, "/gated/", upload(b"%PDF- held"), **json)
            wait_until(lambda: get_pool().running() == 1)
            assert get_pool().snapshot().jobs[0].caller == f"user:{user.pk}"
            PARSED.clear()

            async def second():
                client = AsyncClient(REMOTE_ADDR="10.6.0.2")  # another address, the same user
                await client.aforce_login(user)
                other = hashlib.sha256(b"%PDF- other").hexdigest()
                sent = {"Accept": "application/json", "Pdf-Digest": format_digest(other)}
                return await client.post("/gated/", upload(b"%PDF- other"), headers=sent)

            mine = asyncio.run(second())
            assert mine.status_code == 429 and mine.json()["error"] == "caller_busy"
            assert PARSED == []  # the door answered from the headers
        finally:
            gate.write_text("")
        assert first.result(30).status_code == 200


class _NotedPool:
    """A real local pool whose pressure reads note the thread they ran in."""

    def __init__(self, blocking: bool) -> None:
        from django_pdfpool.admission.local import Pool

        self.pool, self.blocking_reads, self.threads = Pool(1, 1, 10.0), blocking, []

    def pressure(self, key=None, caller=None):
        self.threads.append(threading.get_ident())
        return self.pool.pressure(key, caller)


@pytest.mark.parametrize("blocking", [True, False], ids=["redis-like", "local"])
def test_the_pools_pressure_is_read_off_the_loop_only_when_reading_waits(
    pdfpool, monkeypatch, rf, blocking
):
    """A pool whose reads wait on the network (``blocking_reads``: the Redis pool) is read
    in a thread by the async path; a local pool's memory read stays on the loop."""
    from django_pdfpool import door
    from django_pdfpool.record import AdmissionRecord, pooled_route

    pdfpool()
    noted = _NotedPool(blocking)
    monkeypatch.setattr(door, "get_pool", lambda: noted)
    route = pooled_route("/gated/")
    assert route is not None
    view = route[1]
    request = rf.post("/gated/", REMOTE_ADDR="10.7.0.1")

    def record() -> AdmissionRecord:
        return AdmissionRecord.read({"content-type": "application/pdf", "content-length": "10"})

    async def read() -> int:
        (await arun_steps(door.through_door(request, record(), view, view.job))).release()
        return threading.get_ident()

    loop_thread = asyncio.run(read())
    assert (noted.threads[0] != loop_thread) is blocking
    run_steps(door.through_door(request, record(), view, view.job)).release()
    assert noted.threads[1] == threading.get_ident()  # sync: read right here
