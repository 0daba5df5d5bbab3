"""Staged uploads: nothing staged outlives its request (a caller that raises, a pool that
cannot be had) or its process (named with its pid; start-up sweeps dead processes' copies)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import UploadedFile
from django.http import JsonResponse
from django.test import AsyncClient, Client
from django.urls import path

from django_pdfpool import StagedUpload, decorators, pdf_pooled
from django_pdfpool.uploads import stage, started, sweep
from tests.conftest import wait_until
from tests.project.views import HELD
from tests.support import pdfs
from tests.support.uploads import JSON, upload

ROOT = Path(__file__).resolve().parents[1]


def staged(pdfpool_settings: dict) -> list[str]:
    from django.conf import settings

    return os.listdir(settings.FILE_UPLOAD_TEMP_DIR)


def raising_caller(request):
    raise RuntimeError("the project's caller function failed")


async def araising_caller(request):
    raise RuntimeError("the project's async caller function failed")


def _dead_pid() -> int:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


@pytest.mark.parametrize("caller", [raising_caller, araising_caller])
def test_a_raising_caller_leaves_no_staged_copy_sync_view(pdfpool, caller):
    conf = pdfpool(CALLER=caller)
    with pytest.raises(RuntimeError, match="caller function failed") as raised:
        Client().post("/sync/", {"file": upload(b"%PDF- caller fails")}, **JSON)
    assert staged(conf) == []  # right away: no gc.collect(), the traceback still alive
    assert raised.value is not None


@pytest.mark.parametrize("caller", [raising_caller, araising_caller])
def test_a_raising_caller_leaves_no_staged_copy_async_view(pdfpool, caller):
    conf = pdfpool(CALLER=caller)
    client = AsyncClient()
    with pytest.raises(RuntimeError, match="caller function failed") as raised:
        asyncio.run(client.post("/async/", {"document": upload(b"%PDF- async caller fails")}))
    assert staged(conf) == []
    assert raised.value is not None


def test_a_pool_that_cannot_be_had_leaves_no_staged_copy(pdfpool, monkeypatch):
    conf = pdfpool()

    def no_pool():
        raise ImproperlyConfigured("no pool today")

    monkeypatch.setattr(decorators, "get_pool", no_pool)
    with pytest.raises(ImproperlyConfigured) as raised:
        Client().post("/sync/", {"file": upload(b"%PDF- no pool")}, **JSON)
    assert staged(conf) == [] and raised.value is not None


async def sized(upload: StagedUpload) -> int:
    return upload.size


@pdf_pooled(job=sized)
def reads_its_file(request):
    return JsonResponse({"read": request.FILES["file"].read().decode(), "size": request.pdf})


@pdf_pooled(job=sized)
async def areads_its_file(request):
    return JsonResponse({"read": request.FILES["file"].read().decode(), "size": request.pdf})


urlpatterns = [path("reads/sync/", reads_its_file), path("reads/async/", areads_its_file)]


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("url", ["/reads/sync/", "/reads/async/"])
@pytest.mark.parametrize("memory_size", [2_621_440, 0], ids=["in memory", "on disk"])
def test_the_view_reads_the_uploaded_file_from_its_start(pdfpool, settings, url, memory_size):
    """Staging reads the upload Django made; the view still gets it as Django gives it."""
    pdfpool()
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = memory_size
    data = b"%PDF- read by the job's staging, then by the view"
    response = Client().post(url, {"file": upload(data)}, **JSON)
    assert response.json() == {"read": data.decode(), "size": len(data)}


def test_an_upload_that_cannot_seek_is_staged_all_the_same(tmp_path):
    """As ``File.chunks()`` reads it: a custom upload handler's stream may not seek."""
    data = b"%PDF- from a stream that only reads"
    stream = io.BufferedReader(_Unseekable(data))
    staged = stage(UploadedFile(stream, "doc.pdf", size=len(data)), str(tmp_path))
    assert Path(staged.path).read_bytes() == data
    staged.discard()


class _Unseekable(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self.data.readinto(buffer)


def test_a_staged_copy_is_named_with_its_process(pdfpool):
    conf = pdfpool()
    HELD.release.set()
    response = Client().post("/held/sync/", {"file": upload(b"%PDF- named")}, **JSON)
    assert response.status_code == 200
    own = f"pdfpool-{os.getpid()}.{started(os.getpid())}-"  # the pid and its start time
    assert os.path.basename(HELD.paths[0]).startswith(own)
    assert staged(conf) == []


def test_a_zombie_owns_no_copy(tmp_path):
    """A process that has exited but is not reaped yet (a killed prefork child its master
    has not waited for) runs no job: its copies are stale."""
    child = subprocess.Popen(["true"])
    try:
        fields = lambda: Path(f"/proc/{child.pid}/stat").read_bytes().rpartition(b")")[2].split()  # noqa: E731
        wait_until(lambda: fields()[0] == b"Z")
        start = int(fields()[19])
        copy = tmp_path / f"pdfpool-{child.pid}.{start}-zzz999.pdf"
        copy.write_bytes(b"%PDF- staged")
        assert started(child.pid) is None
        assert sweep(str(tmp_path), None) == [str(copy)]
    finally:
        child.wait()


def test_start_up_sweeps_stale_copies_of_dead_processes_only(tmp_path):
    """A copy is kept only while the very process named in it lives: its pid and its start
    time. A pid alone is reused (pid 1 after every restart in a container)."""
    folder = tmp_path / "staged"
    folder.mkdir()
    me, start = os.getpid(), started(os.getpid())
    dead = folder / f"pdfpool-{_dead_pid()}.{start}-abc123.pdf"
    alive = folder / f"pdfpool-{me}.{start}-def456.pdf"  # this test's process: alive
    past_life = folder / f"pdfpool-{me}.{start - 1}-aaa111.pdf"  # its pid, another process
    init = folder / f"pdfpool-1.{started(1)}-bbb222.pdf"  # pid 1 now: alive
    init_before = folder / f"pdfpool-1.{started(1) + 7}-ccc333.pdf"  # pid 1 of another boot
    old = folder / "pdfpool-k2j4h5g6.pdf"  # no owner in the name: by age
    fresh = folder / "pdfpool-a1b2c3d4.pdf"
    other = folder / "notes.pdf"
    for file in (dead, alive, past_life, init, init_before, old, fresh, other):
        file.write_bytes(b"%PDF- staged")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.project.settings"}
    env["PDFPOOL_JSON"] = json.dumps({"WAIT": 5, "TIMEOUT": 5})
    env["PDFPOOL_TEST_STAGED"] = str(folder)
    setup = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert setup.returncode == 0, setup.stderr
    kept = (alive, init, fresh, other)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in kept)


def test_a_stale_entry_the_sweep_cannot_remove_is_left_and_uploads_go_on(pdfpool):
    """An entry named as a dead process's copy that cannot be deleted (here a directory;
    in a shared sticky /tmp, another user's file) stays: neither Django's start-up nor the
    first upload of a process fails on it."""
    stuck = Path(pdfpool.staged) / f"pdfpool-{_dead_pid()}.{started(os.getpid())}-dir000.pdf"
    stuck.mkdir()
    assert sweep(pdfpool.staged, None) == []
    response = Client().post("/sync/", {"file": upload(pdfs.simple(["goes on"]))}, **JSON)
    assert response.status_code == 200, response.content
    assert os.listdir(pdfpool.staged) == [stuck.name]


LIFE = """import json, os, threading, time
import django

django.setup()  # the start-up sweep
from django.conf import settings
from django.test import Client

from tests.project.views import HELD
from tests.support.uploads import JSON, upload

print(json.dumps(sorted(os.listdir(settings.FILE_UPLOAD_TEMP_DIR))), flush=True)
post = lambda: Client().post("/held/sync/", {"file": upload(b"%PDF- a life")}, **JSON)
threading.Thread(target=post, daemon=True).start()
deadline = time.monotonic() + 60
while not HELD.paths and time.monotonic() < deadline:  # the job runs, held: its copy staged
    time.sleep(0.01)
print(json.dumps([os.getpid(), os.path.basename(HELD.paths[0])]), flush=True)
threading.Event().wait()  # killed here, mid-job
"""


def test_a_crash_as_pid_1_of_a_container_leaves_no_copy_after_the_restart(tmp_path):
    """A server that is pid 1 in a pid namespace (as in Docker or Kubernetes) is killed with
    SIGKILL mid-job and restarted the same way: pid 1 again, which lives, but not the same
    process (another start time), so the start-up sweep removes the copy of its last life."""
    refused = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    if refused.returncode:
        pytest.skip(f"unshare --pid is refused here: {refused.stderr.strip()}")
    folder = tmp_path / "staged"
    folder.mkdir()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.project.settings"}
    env |= {
        "PDFPOOL_JSON": json.dumps({"WAIT": 5, "TIMEOUT": 5}),
        "PDFPOOL_TEST_STAGED": str(folder),
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    lives = []
    for _ in range(2):
        server = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", LIFE],
            env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            swept = json.loads(server.stdout.readline())
            pid, copy = json.loads(server.stdout.readline())
        finally:
            for inner in _children_of(server.pid):
                os.kill(inner, signal.SIGKILL)  # kill -9, mid-job
            server.wait(timeout=60)
        lives.append((swept, pid, copy))
    (_, first_pid, first_copy), (swept, second_pid, second_copy) = lives
    assert first_pid == second_pid == 1 and first_copy.startswith("pdfpool-1.")
    assert first_copy not in swept, "the copy of the server's last life outlived its restart"
    assert swept == [] and sorted(os.listdir(folder)) == [second_copy]


def _children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the pid namespace's init, seen from here)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{entry}/stat", "rb") as stat:
            if int(stat.read().rpartition(b")")[2].split()[1]) == pid:
                found.append(int(entry))
    return found


FULL_DISK = """
import asyncio, json, os, resource, sys
from django_pdfpool.exceptions import RunnerLost
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.uploads import stage_chunks

folder = sys.argv[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # EFBIG past it: a full disk
sandbox.configure(warm=False, tmp_dir=folder)
seen, fds = [], os.listdir("/proc/self/fd")
big = b"%PDF-" + b"x" * 300_000
for copy in (
    lambda: stage_chunks([big[:65536]] * 5, "big.pdf", folder),
    lambda: asyncio.run(sandbox.extract(big, timeout=5, memory_limit=1 << 28)),
):
    try:
        copy()
        seen.append(None)
    except Exception as exc:
        seen.append([type(exc).__name__, exc.status if isinstance(exc, RunnerLost) else None])
print(json.dumps([seen, os.listdir(folder), os.listdir("/proc/self/fd") == fds]))
"""


FULL_DISK_VIEWS = """
import json, os, resource, sys
import django
django.setup()
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # EFBIG past it: a full disk
answers = []
for path, field in (("/sync/", "file"), ("/async/", "document")):
    upload = SimpleUploadedFile("big.pdf", b"%PDF-" + b"x" * 300_000, "application/pdf")
    response = Client().post(path, {field: upload}, HTTP_ACCEPT="application/json")
    answers.append([response.status_code, response.json().get("error")])
print(json.dumps([answers, os.listdir(sys.argv[1])]))
"""


def test_no_room_to_stage_an_upload_answers_503_from_either_view(tmp_path):
    """The decorator answers a disk with no room for the staged copy as the host's refusal
    (503 ``runner_lost``), from a sync view and an async one, not a 500; no copy is left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PDFPOOL_TEST_STAGED": str(tmp_path)}
    env["DJANGO_SETTINGS_MODULE"] = "tests.project.settings"
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK_VIEWS, str(tmp_path)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    answers, left = json.loads(proc.stdout.splitlines()[-1])
    assert answers == [[503, "runner_lost"], [503, "runner_lost"]] and left == []


def test_no_room_to_copy_an_upload_is_a_503_that_leaves_no_file(tmp_path):
    """A file system with no room for a copy (here RLIMIT_FSIZE in a child process: EFBIG, as
    ENOSPC or EDQUOT would be) refuses the job as the host's fault (503 ``runner_lost``, to be
    tried again), staged or copied by the sandbox, and leaves no partial copy nor descriptor."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["DJANGO_SETTINGS_MODULE"] = "tests.project.settings"
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen, left, same_fds = json.loads(proc.stdout)
    assert seen == [["RunnerLost", 503], ["RunnerLost", 503]]
    assert left == [] and same_fds
