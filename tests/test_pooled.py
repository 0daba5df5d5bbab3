"""``extract_pooled`` / ``aextract_pooled``: extraction outside a view under the process's
pool (a path, bytes, a Django File or FieldFile of any storage), sharing single-flight
keys with uploads; the caller's files are never deleted; ``pdfpool extract --pool``."""

from __future__ import annotations

import asyncio
import functools
import gc
import hashlib
import io
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, InMemoryStorage
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.fields.files import FieldFile, FileField
from django.http import JsonResponse
from django.test import AsyncClient, Client
from django.urls import path

from django_pdfpool import Extraction, StagedUpload, aextract_pooled, extract_pooled, get_pool
from django_pdfpool.conf import get_settings
from django_pdfpool.decorators import extract_upload
from django_pdfpool.exceptions import CallerBusy, UploadTooLarge
from django_pdfpool.responses import describe
from django_pdfpool.uploads import STAGING_CHUNK
from tests import test_configured
from tests.conftest import held_requests, until, wait_until
from tests.project.views import HELD, held_job
from tests.support import pdfs
from tests.support.servers import project_env
from tests.test_decorators import JSON, held_key, post, upload

pytest_plugins = ["tests.support.redis_fixtures"]
backend = test_configured.backend  # the fixture: the local pool, or a Redis pool
SOON = 60


def stored(tmp_path, data: bytes, name: str = "stored.pdf") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_path_is_extracted_under_the_pool_and_left_where_it_was(pdfpool, tmp_path):
    data = pdfs.padded("from a task", 3 * STAGING_CHUNK)  # copied whole, a chunk at a time
    path = stored(tmp_path, data)
    result = extract_pooled(path, caller="task:1")
    assert isinstance(result, Extraction) and result.text == "from a task"
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    with open(path, "rb") as mine:
        assert mine.read() == data  # the caller's file: untouched
    assert os.listdir(pdfpool.staged) == []  # the job's copy: gone
    assert get_pool().snapshot().counters.started == 1


@pytest.mark.parametrize("kind", ["bytes", "filesystem", "memory", "open file"])
def test_bytes_and_files_of_any_storage(pdfpool, tmp_path, kind):
    data = pdfs.simple([f"kept in {kind}"])
    if kind == "bytes":
        source = data
    elif kind == "open file":
        source = ContentFile(data, name="x.pdf")
    else:
        media = tmp_path / "media"
        storage = InMemoryStorage() if kind == "memory" else FileSystemStorage(location=media)
        name = storage.save("docs/in.pdf", ContentFile(data))
        source = FieldFile(None, FileField(storage=storage), name)
    result = extract_pooled(source, caller="task:files")
    assert result.text == f"kept in {kind}"
    if kind in ("filesystem", "memory"):
        assert source.storage.exists(source.name)  # never deleted
    if kind == "filesystem":
        assert source.closed  # opened for the copy, closed again
    if kind == "open file":  # left open at its start, as the decorator leaves request.FILES
        assert not source.closed and source.read() == data
    assert os.listdir(pdfpool.staged) == []


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_bytes_are_staged_without_a_copy_of_their_own(pdfpool, kind):
    """A PDF held in memory is written to its staged copy piece by piece: the caller's
    buffer is never copied whole (an upload of MAX_UPLOAD_SIZE held twice at once)."""
    import tracemalloc

    from django_pdfpool.pooled import stage_source

    size = 8 << 20
    source = kind(b"%PDF-" + bytes(size))
    tracemalloc.start()
    try:
        staged = stage_source(source, get_settings())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    try:
        assert (staged.size, staged.sha256) == (size + 5, hashlib.sha256(source).hexdigest())
        assert peak < size // 4, peak
    finally:
        staged.discard()


def test_a_staged_upload_of_a_stored_file_never_deletes_it(pdfpool, tmp_path):
    """``extract_upload(StagedUpload(path=<your file>))`` once deleted it on GC."""
    data = pdfs.simple(["stored for good"])
    path = stored(tmp_path, data)
    mine = StagedUpload(path, hashlib.sha256(data).hexdigest(), len(data), "stored.pdf")
    assert asyncio.run(extract_upload(mine)).text == "stored for good"
    mine.discard()
    del mine
    gc.collect()
    assert os.path.exists(path)


def test_an_upload_and_a_task_for_the_same_bytes_share_one_job(pdfpool):
    """Everything is taken by the upload's job (SLOTS=1, QUEUE=0): the task runs only if it
    joins it, which it does only with the same key."""
    pdfpool(SLOTS=1, QUEUE=0)
    HELD.reset(extract=True)
    data = pdfs.simple(["shared by a view and a task"])
    with held_requests(2) as threads:
        viewed = threads.submit(post, "/held/sync/", data, "10.0.9.1")
        wait_until(lambda: HELD.runs != [])
        tasked = threads.submit(extract_pooled, data, caller="task:2", job=held_job)
        wait_until(lambda: get_pool().waiting(held_key(data)) == 1)
        HELD.release.set()
        response, result = viewed.result(SOON), tasked.result(SOON)
    assert response.status_code == 200
    assert response.json()["pdf"]["text"] == result.text == "shared by a view and a task"
    counters = get_pool().snapshot().counters
    assert (counters.started, counters.joined) == (1, 1)
    assert HELD.runs == [hashlib.sha256(data).hexdigest()]


def test_the_default_job_shares_its_key_with_uploads_too(pdfpool):
    """A slow extraction started by a task holds the only place; the identical upload is
    answered 200 only by joining it (a different key would be 503 busy)."""
    pdfpool(SLOTS=1, QUEUE=0)
    data = pdfs.slow_pdf("task first", 1)
    with ThreadPoolExecutor(1) as threads:
        tasked = threads.submit(extract_pooled, data, caller="task:3")
        wait_until(lambda: get_pool().running() == 1, SOON)
        response = Client(REMOTE_ADDR="10.0.9.2").post("/sync/", {"file": upload(data)}, **JSON)
        result = tasked.result(SOON)
    assert response.status_code == 200, response.content
    assert response.json()["pdf"]["sha256"] == result.sha256
    assert get_pool().snapshot().counters.joined == 1


def test_the_limits_apply(pdfpool):
    pdfpool(MAX_UPLOAD_SIZE=1000, SLOTS=1, QUEUE=0)
    with pytest.raises(UploadTooLarge):
        extract_pooled(b"%PDF-" + b"x" * 2000, caller="task:4")
    with pytest.raises(UploadTooLarge):  # a file that grows past its size is cut too
        extract_pooled(io.BytesIO(b"x" * 2000).getvalue(), caller="task:4")
    assert os.listdir(pdfpool.staged) == []
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(extract_pooled, b"%PDF- one", caller="task:5", job=held_job)
        wait_until(lambda: get_pool().running() == 1)
        with pytest.raises(CallerBusy) as refused:
            extract_pooled(b"%PDF- two", caller="task:5", job=held_job)
        assert refused.value.retry_after > 0
    with pytest.raises(TypeError):
        extract_pooled(b"%PDF-", caller="")


def test_a_source_it_cannot_read_is_a_clear_type_error(pdfpool, tmp_path):
    """An open file object (not a Django ``File``) is no path: the error says what is read,
    not that a path may be bytes (bytes are the PDF itself here)."""
    with open(stored(tmp_path, pdfs.simple(["mine"])), "rb") as mine:
        for source in (mine, io.BytesIO(b"%PDF-"), 42):
            with pytest.raises(TypeError, match=r"django\.core\.files\.File") as refused:
                extract_pooled(source, caller="task:types")
            assert type(source).__name__ in str(refused.value)
        with open(mine.name, encoding="latin-1") as text, pytest.raises(TypeError, match="text"):
            extract_pooled(File(text), caller="task:types")
    assert os.listdir(pdfpool.staged) == []


@pytest.mark.parametrize("kind", ["StringIO", "FieldFile opened 'r'"])
def test_a_source_that_reads_text_is_a_clear_type_error(pdfpool, tmp_path, kind):
    """A file read as text without a ``mode`` of its own to say so (a ``StringIO``, a
    ``FieldFile`` its storage opened): told it is text, not that strings cannot be hashed."""
    if kind == "StringIO":
        source = File(io.StringIO("%PDF- as text"), name="text.pdf")
    else:
        storage = FileSystemStorage(location=tmp_path / "media")
        name = storage.save("t.pdf", ContentFile(b"x"))
        source = FieldFile(None, FileField(storage=storage), name)
        source.open("r")
    with pytest.raises(TypeError, match="text mode: open it with 'rb'"):
        extract_pooled(source, caller="task:text")
    assert os.listdir(pdfpool.staged) == []


def test_the_async_api(pdfpool, tmp_path):
    data = pdfs.simple(["awaited"])

    async def main():
        return await asyncio.gather(
            aextract_pooled(data, caller="a:1"),
            aextract_pooled(stored(tmp_path, data), caller="a:2"),
        )

    first, second = asyncio.run(main())
    assert first.text == second.text == "awaited"
    with pytest.raises(RuntimeError, match="aextract_pooled"):
        asyncio.run(_sync_in_async(data))


async def _sync_in_async(data):
    return extract_pooled(data, caller="a:3")


def test_the_command_extracts_through_the_pool(pdfpool, tmp_path):
    path = stored(tmp_path, pdfs.simple(["by the command"]))
    out = io.StringIO()
    call_command("pdfpool", "extract", path, "--pool", stdout=out)
    assert "by the command" in out.getvalue()
    assert get_pool().snapshot().counters.started == 1
    pdfpool(SLOTS=2, QUEUE=0)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(extract_pooled, b"%PDF- held", caller="command:pdfpool", job=held_job)
        wait_until(lambda: get_pool().running() == 1)
        with pytest.raises(CommandError, match="caller_busy") as refused:
            call_command("pdfpool", "extract", path, "--pool", stdout=io.StringIO())
        assert refused.value.returncode == 3
        out = io.StringIO()
        call_command("pdfpool", "extract", path, "--pool", "--caller", "other", stdout=out)
        assert "by the command" in out.getvalue()


def test_a_cancelled_async_call_leaves_no_copy(pdfpool):
    """Cancelled while its source is being copied (in a worker thread): the copy made
    after the cancel is deleted by the thread that made it, not left for garbage collection."""
    data = b"%PDF-" + b"x" * (8 << 20)

    async def main():
        task = asyncio.ensure_future(aextract_pooled(data, caller="a:cancel"))
        await asyncio.sleep(0)  # the copy has started in its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    wait_until(lambda: os.listdir(pdfpool.staged) == [])
    assert get_pool().snapshot().counters.started == 0


def answered(response) -> tuple:
    """A view's answer as ``said`` words an outcome: status, code, message, Retry-After."""
    body = response.json()
    if response.status_code == 200:
        return (200, body["pdf"]["text"])
    retry = response.headers.get("Retry-After")
    return (response.status_code, body["error"], body["message"], retry and int(retry))


def said(call) -> tuple:
    """``call()``'s outcome as the decorator would answer it."""
    try:
        return (200, call().text)
    except Exception as error:
        described = describe(error)
        return (described.status, described.code, described.message, described.retry_after)


@pytest.mark.parametrize(
    "data",
    [b"", b"not a PDF at all", b"%PDF-1.4\n", pdfs.simple(["the same"]), b"%PDF-" + b"x" * 6000],
    ids=["empty", "not a pdf", "damaged", "a pdf", "too large"],
)
def test_extract_pooled_answers_as_the_decorator(backend, data):
    backend(MAX_UPLOAD_SIZE=5000)
    assert said(lambda: extract_pooled(data, caller="ip:10.0.7.1")) == answered(
        post("/sync/", data, "10.0.7.1")
    )
    assert said(lambda: asyncio.run(aextract_pooled(data, caller="ip:10.0.7.1"))) == answered(
        post("/async/", data, "10.0.7.1", field="document")
    )
    assert os.listdir(settings.FILE_UPLOAD_TEMP_DIR) == []


def test_extract_pooled_is_refused_as_the_decorator(backend):
    """One place, taken by caller ip:10.0.7.2: that caller is busy (429) and anyone else finds
    the pool full (503), through either entry, with the same words and Retry-After."""
    backend(SLOTS=1, QUEUE=0)
    HELD.reset()
    with held_requests(1) as threads:
        threads.submit(extract_pooled, b"%PDF- held", caller="ip:10.0.7.2", job=held_job)
        wait_until(lambda: get_pool().running() == 1)
        for ip in ("10.0.7.2", "10.0.7.3"):
            data = f"%PDF- from {ip}".encode()
            view = answered(post("/held/sync/", data, ip))
            assert view[0] == (429 if ip == "10.0.7.2" else 503)
            direct = functools.partial(extract_pooled, data, caller=f"ip:{ip}", job=held_job)
            assert said(direct) == view
            awaited = aextract_pooled(data, caller=f"ip:{ip}", job=held_job)
            assert said(functools.partial(asyncio.run, awaited)) == answered(
                post("/held/async/", data, ip)
            )


@pytest.mark.parametrize("entry", [extract_pooled, aextract_pooled], ids=["sync", "async"])
def test_a_job_that_is_no_function_is_a_type_error_naming_the_argument(pdfpool, entry):
    """``job=42`` is a wrong argument, not a project misconfigured: a TypeError that names
    ``job``, before anything is copied."""
    with pytest.raises(TypeError, match=r"job must be an async function .*, not 42"):
        called = entry(b"%PDF- x", caller="task:9", job=42)
        if asyncio.iscoroutine(called):
            asyncio.run(called)
    assert os.listdir(pdfpool.staged) == []


INTERRUPTED = """
import asyncio, pathlib, signal, sys, threading, time

import django

signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job's is ignored

django.setup()
from django_pdfpool import extract_pooled, get_pool

gate = pathlib.Path(sys.argv[1])


async def held(upload):
    while not gate.exists():
        await asyncio.sleep(0.01)
    return "finished"


threading.Thread(target=extract_pooled, args=(b"%PDF- holds the slot",), daemon=True,
                 kwargs={"caller": "cli:holder", "job": held}).start()
while get_pool().running() == 0:
    time.sleep(0.01)


def tell_queued():
    while get_pool().queued() == 0:
        time.sleep(0.01)
    print("queued", flush=True)


threading.Thread(target=tell_queued, daemon=True).start()
try:
    print(extract_pooled(b"%PDF- queued", caller="cli", job=held), flush=True)
except KeyboardInterrupt:
    left = time.monotonic() + 10
    while get_pool().queued() and time.monotonic() < left:
        time.sleep(0.01)
    print("interrupted", get_pool().running(), get_pool().queued(), flush=True)
"""


def test_ctrl_c_stops_a_sync_call_at_once_and_frees_its_queue_place(tmp_path):
    """Ctrl-C (or any signal's exception: Celery's soft time limit) reaches ``extract_pooled``
    while its job is queued: the call stops, and the job, left by its only caller, gives up
    its place as a cancelled async call's does; the running job others may share runs on."""
    gate = tmp_path / "gate"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.project.settings"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path])
    env.update(project_env(tmp_path), PDFPOOL_JSON='{"SLOTS": 1, "QUEUE": 1, "WAIT": 60}')
    command = [sys.executable, "-c", INTERRUPTED, str(gate)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    ).start()
    try:
        assert lines.get(timeout=SOON) == "queued\n"
        process.send_signal(signal.SIGINT)
        assert lines.get(timeout=SOON) == "interrupted 1 0\n"
    finally:
        gate.touch()
        assert process.wait(SOON) == 0  # at exit the pool drains: the job ends, then the process


def sync_view_extracting(request):
    return JsonResponse({"size": extract_pooled(b"%PDF- queued", caller="view", job=held_job)})


urlpatterns = [path("extracting/", sync_view_extracting)]


@pytest.mark.urls(__name__)
def test_a_sync_view_under_asgi_whose_client_leaves_frees_its_queue_place(pdfpool):
    """Django runs a sync view in a thread and cancels it when its client goes away: the
    ``extract_pooled`` it waits on leaves its queued job, as ``aextract_pooled`` would."""
    pdfpool(SLOTS=1, QUEUE=1)
    with held_requests(1) as threads:
        threads.submit(extract_pooled, b"%PDF- held", caller="holder", job=held_job)
        wait_until(lambda: get_pool().running() == 1)

        async def client_leaves():
            request = asyncio.ensure_future(AsyncClient().get("/extracting/"))
            await until(lambda: get_pool().queued() == 1)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            await until(lambda: get_pool().queued() == 0)

        asyncio.run(client_leaves())


INTERRUPTED_FIRST = """
import asyncio, pathlib, signal, sys, threading, time

import django

django.setup()
from django_pdfpool import extract_pooled, get_pool

gate, main, heard = pathlib.Path(sys.argv[1]), threading.main_thread(), threading.Event()


def interrupt(signum, frame):
    heard.set()
    raise KeyboardInterrupt


def first_thread(frame, event, arg):  # the first thread the call starts: Ctrl-C comes first
    threading.settrace(None)
    sys.settrace(None)
    signal.pthread_kill(main.ident, signal.SIGINT)
    heard.wait(10)


async def held(upload):
    while not gate.exists():
        await asyncio.sleep(0.01)
    return "finished"


signal.signal(signal.SIGINT, interrupt)
threading.settrace(first_thread)
try:
    print(extract_pooled(b"%PDF- never started", caller="cli", job=held), flush=True)
except KeyboardInterrupt:
    left = time.monotonic() + 10
    while (get_pool().running() or get_pool().queued()) and time.monotonic() < left:
        time.sleep(0.01)
    print("interrupted", get_pool().running(), get_pool().queued(), flush=True)
"""


def test_ctrl_c_before_the_call_reached_the_pool_runs_no_job(tmp_path):
    """Ctrl-C reaches ``extract_pooled`` before its wait has begun: no job runs for it (none
    holds a slot, nor the caller's place, nor the process's exit until it ends)."""
    gate = tmp_path / "gate"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.project.settings"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path])
    env.update(project_env(tmp_path), PDFPOOL_JSON='{"SLOTS": 1, "QUEUE": 1, "WAIT": 60}')
    command = [sys.executable, "-c", INTERRUPTED_FIRST, str(gate)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=SOON)
    finally:
        gate.touch()
    assert (done.stdout, done.returncode) == ("interrupted 0 0\n", 0), done.stderr
