"""The admin status page: who may see it, that it shows what the pool's ``snapshot()`` says
while jobs are held running and queued, its JSON, the history recorder behind its
chart, and the optional Prometheus endpoint."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import html
import os
import re
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from django_pdfpool import configured, get_pool
from django_pdfpool.admission import history, jobs
from django_pdfpool.admission.history import Recorder
from django_pdfpool.admission.ledger import Counters, DurationSummary, PoolSnapshot
from django_pdfpool.sandbox.children import recent_peaks
from django_pdfpool.status import page as status_page
from tests.conftest import held_requests, wait_until
from tests.project.views import HELD
from tests.support import pdfs
from tests.test_decorators import JSON, held_key, post

URL = "/admin/django_pdfpool/poolstatus/"

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(django_user_model):
    """One user per row of the permission matrix (None: anonymous)."""
    perm = Permission.objects.get(
        codename="view_pool_status", content_type__app_label="django_pdfpool"
    )

    def make(name, **flags):
        return django_user_model.objects.create_user(name, **flags)  # no password: fast

    non_staff = make("visitor")
    non_staff.user_permissions.add(perm)  # the permission alone does not open the admin
    granted = make("granted", is_staff=True)
    granted.user_permissions.add(perm)
    return {
        "anonymous": None,
        "non_staff": non_staff,
        "staff": make("staff", is_staff=True),
        "staff_with_perm": granted,
        "superuser": django_user_model.objects.create_superuser("root"),
    }


def client_for(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


# --- who may see it -------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("anonymous", "login"),
        ("non_staff", "login"),
        ("staff", 403),
        ("staff_with_perm", 200),
        ("superuser", 200),
    ],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["page", "json"])
def test_permission_matrix(pdfpool, users, who, expected, as_json):
    response = client_for(users[who]).get(URL, {"format": "json"} if as_json else {})
    if expected == "login":
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/?next=/admin/django_pdfpool/")
    elif expected == 403:
        assert response.status_code == 403
        assert b"pdfpool" not in response.content
    else:
        assert response.status_code == 200
        if as_json:
            assert response["Content-Type"] == "application/json"
            assert response.json()["slots"] == get_pool().slots
        else:
            assert response["Content-Type"].startswith("text/html")
            assert b'id="pdfpool-status"' in response.content
        assert "no-cache" in response["Cache-Control"]


def test_the_admin_index_lists_the_entry_only_for_those_allowed(pdfpool, users):
    for who, listed in [("staff", False), ("staff_with_perm", True), ("superuser", True)]:
        index = client_for(users[who]).get("/admin/")
        assert index.status_code == 200
        assert (f'href="{URL}"' in index.content.decode()) is listed, who
        assert ("PDF pool" in index.content.decode()) is listed, who
    app_index = client_for(users["staff_with_perm"]).get("/admin/django_pdfpool/")
    assert app_index.status_code == 200 and "Status" in app_index.content.decode()
    assert client_for(users["staff"]).get("/admin/django_pdfpool/").status_code == 404


def test_there_is_nothing_to_add_change_or_delete(pdfpool, users):
    root = client_for(users["superuser"])
    for suffix in ["add/", "1/change/", "1/delete/", "1/history/"]:
        assert root.get(URL + suffix).status_code == 404, suffix
    index = root.get("/admin/").content.decode()
    assert f'href="{URL}"' in index and "poolstatus/add" not in index


# --- what it shows ----------------------------------------------------------------


def page_fields(page: str) -> dict[str, str]:
    """Every data-field on the page, with the text it shows."""
    found = re.findall(r'data-field="([\w.]+)" data-format="\w+">([^<]*)<', page)
    return {field: html.unescape(text) for field, text in found}


def job_rows(page: str) -> list[list[str]]:
    body = page.split('id="pdfpool-jobs">', 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r'<tr class="(?:running|queued)">(.*?)</tr>', body, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in row] for row in cells]


def held_scene(threads: ThreadPoolExecutor) -> list:
    """With SLOTS=2, QUEUE=2: two jobs running (one shared by a second caller), two
    queued, one caller refused for a full queue and one for having a job in flight.
    ``threads`` needs six workers: five held requests, and the refused ones in turn."""
    futures = [threads.submit(post, "/held/sync/", b"%PDF- a", "10.1.0.1")]
    futures.append(threads.submit(post, "/held/sync/", b"%PDF- b", "10.1.0.2"))
    wait_until(lambda: get_pool().running() == 2)
    futures.append(threads.submit(post, "/held/sync/", b"%PDF- a", "10.1.0.3"))  # joins a
    wait_until(lambda: get_pool().waiting(held_key(b"%PDF- a")) == 1)
    futures.append(threads.submit(post, "/held/sync/", b"%PDF- c", "10.1.0.4"))
    wait_until(lambda: get_pool().queued() == 1)
    refused = threads.submit(post, "/held/sync/", b"%PDF- f", "10.1.0.1").result(30)
    assert refused.status_code == 429  # while the queue has room: the caller's rule
    futures.append(threads.submit(post, "/held/sync/", b"%PDF- d", "10.1.0.5"))
    wait_until(lambda: get_pool().queued() == 2)
    refused = threads.submit(post, "/held/sync/", b"%PDF- e", "10.1.0.6").result(30)
    assert refused.status_code == 503
    return futures


def test_the_page_and_json_match_the_snapshot_while_jobs_are_held(pdfpool, users):
    pdfpool(SLOTS=2, QUEUE=2, WAIT=30)
    root = client_for(users["superuser"])
    with held_requests(6) as threads:
        futures = held_scene(threads)
        page = root.get(URL).content.decode()
        data = root.get(URL, {"format": "json"}).json()
        snap = get_pool().snapshot()
        HELD.release.set()
        assert [f.result(timeout=30).status_code for f in futures] == [200] * 5

    assert (snap.running, snap.queued, snap.counters.refused_busy) == (2, 2, 1)
    assert (snap.counters.refused_caller, snap.counters.joined) == (1, 1)
    fields = page_fields(page)
    expected = {"running": snap.running, "queued": snap.queued, "slots": 2, "queue": 2}
    expected |= {f"counters.{k}": v for k, v in vars(snap.counters).items()}
    assert {k: fields[k] for k in expected} == {k: str(v) for k, v in expected.items()}
    assert fields["wait"] == "30 s" and fields["engine"] == "pypdf" and fields["pid"].isdigit()

    rows = job_rows(page)
    by_key = {job.key: job for job in snap.jobs}
    assert len(rows) == len(snap.jobs) == 4
    assert [row[2] for row in rows] == ["running", "running", "queued", "queued"]
    for row in rows:
        (key,) = [k for k in by_key if status_page.short_key(k) == row[0]]
        assert f'title="{key}"' in page
        job = by_key.pop(key)
        assert row[1:4] == [job.caller, job.state, str(job.sharers)]
    assert by_key == {}

    assert {k: data[k] for k in ("slots", "queue", "wait", "running", "queued", "closed")} == {
        "slots": 2, "queue": 2, "wait": 30.0, "running": 2, "queued": 2, "closed": False
    }  # fmt: skip
    assert data["counters"] == vars(snap.counters)
    got = {(j["key"], j["caller"], j["state"], j["sharers"]) for j in data["jobs"]}
    assert got == {(j.key, j.caller, j.state, j.sharers) for j in snap.jobs}
    shared = next(j for j in data["jobs"] if j["key"] == held_key(b"%PDF- a"))
    assert (
        shared["sharers"] == 2
        and shared["short_key"] == "held_job:" + (hashlib.sha256(b"%PDF- a").hexdigest()[:12])
    )


def test_a_job_refused_after_waiting_counts_in_the_queue_wait_figures(pdfpool, users):
    pdfpool(SLOTS=1, QUEUE=1, WAIT=0.3)
    root = client_for(users["superuser"])
    with held_requests(2) as threads:
        running = threads.submit(post, "/held/sync/", b"%PDF- held", "10.3.0.1")
        wait_until(lambda: get_pool().running() == 1)
        refused = threads.submit(post, "/held/sync/", b"%PDF- waits", "10.3.0.2").result(30)
        assert refused.status_code == 503  # queued, then given up after WAIT
        data = root.get(URL, {"format": "json"}).json()
        page = root.get(URL).content.decode()
        HELD.release.set()
        assert running.result(timeout=30).status_code == 200
    assert data["counters"]["started"] == 1 and data["counters"]["refused_busy"] == 1
    assert data["queue_wait"]["count"] == 2  # the started job's wait, and the refused one's
    assert data["queue_wait"]["max"] >= 0.3
    assert page_fields(page)["queue_wait.count"] == "2"


def test_the_page_says_which_process_answered_and_that_the_figures_are_its_own(pdfpool, users):
    page = client_for(users["superuser"]).get(URL).content.decode()
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())
    assert f"Answered by process {os.getpid()} on {socket.gethostname()}." in text
    assert "every figure below is this process's" in text
    assert "Counted since its pool was built at" in text
    assert "Counters (this process)" in text and "Recent jobs (this process)" in text
    assert 'id="pdfpool-switched" hidden' in page  # status.js fills it if another answers


@pytest.mark.parametrize("use_tz", [True, False])
def test_times_are_shown_in_the_projects_time_zone(pdfpool, users, settings, use_tz):
    settings.USE_TZ, settings.TIME_ZONE = use_tz, "America/New_York"
    ended = datetime.datetime(2026, 1, 15, 5, 0, 5, tzinfo=datetime.UTC)  # 00:00:05 there
    recent_peaks.clear()
    recent_peaks.append((ended.timestamp(), 100 << 20, "cold"))
    try:
        page = client_for(users["superuser"]).get(URL).content.decode()
    finally:
        recent_peaks.clear()
    peaks = page.split('id="pdfpool-peaks">', 1)[1]
    assert re.search(r"<td>([^<]*)</td>", peaks)[1] == "00:00:05"
    assert re.search(r"Snapshot at <time[^>]*>[\d:]+ (\w+)<", page)[1] in ("EST", "EDT")
    assert 'data-time-zone="America/New_York"' in page  # status.js formats times in it


def in_plus_0530(get_response):
    """A middleware activating a fixed offset, as projects that keep each user's offset do."""

    def middleware(request):
        with timezone.override(datetime.timezone(datetime.timedelta(hours=5, minutes=30))):
            return get_response(request)

    return middleware


def test_a_fixed_offset_time_zone_is_named_as_browsers_know_it(pdfpool, users, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.in_plus_0530"]
    page = client_for(users["superuser"]).get(URL).content.decode()
    assert 'data-time-zone="+05:30"' in page  # Intl refuses Django's name, "UTC+05:30"


def test_the_admins_own_words_follow_the_projects_language(pdfpool, users, settings):
    settings.LANGUAGE_CODE = "fr"
    page = client_for(users["superuser"]).get(URL).content.decode()
    assert '<a href="/admin/">Accueil</a>' in page  # as on every other admin page
    assert "<title>PDF pool status | Site d\u2019administration de Django</title>" in page


def test_numbers_are_written_as_status_js_writes_them_whatever_the_locale(pdfpool, users, settings):
    settings.LANGUAGE_CODE, settings.USE_THOUSAND_SEPARATOR = "fr", True
    pdfpool(DOOR={"BODY_TIMEOUT": 12.5, "BUDGET": 2000})
    page = client_for(users["superuser"]).get(URL).content.decode()
    assert f'data-pid="{os.getpid()}"' in page  # what status.js compares the JSON's pid with
    assert "(budget 2000 bodies; deadline 12.5 s plus" in page
    assert "refusals per 1.0 s" in page


def test_the_json_fields_are_the_documented_ones(pdfpool, users):
    data = client_for(users["staff_with_perm"]).get(URL, {"format": "json"}, **JSON).json()
    snapshot_fields = set(PoolSnapshot.__dataclass_fields__)
    assert set(data) == snapshot_fields | {
        "pid", "host", "timeout", "memory_limit", "max_upload_size", "engine", "history",
        "backend", "cluster", "children", "sandbox", "door", "memory",
    }  # fmt: skip
    assert data["scope"] == "process" and data["counted_since"] <= data["taken_at"]
    assert set(data["door"]) == {
        "on", "held", "shed", "timed_out", "budget", "budget_bytes", "body_timeout",
        "body_min_rate", "body_timeout_max",
    }  # fmt: skip
    assert set(data["children"]) == {"forked", "cold", "template", "ready", "restarts"}
    assert set(data["sandbox"]) == {"level", "required", "refusing", "landlock_abi", "layers"}
    assert set(data["memory"]) == {
        "allowed", "allowed_by", "pool", "server_rss", "children", "children_rss", "fits",
        "recent_jobs",
    }  # fmt: skip
    assert set(data["history"]) == {"interval", "window", "t", "running", "queued", "refused"}
    assert set(data["counters"]) == set(Counters.__dataclass_fields__)
    assert set(data["run_time"]) == {"count", "mean", "p95", "max"}
    assert (data["timeout"], data["memory_limit"]) == (30.0, 512 * 1024 * 1024)


@pytest.mark.parametrize("door", [True, False])
def test_the_door_block_says_whether_the_door_is_on(pdfpool, users, door):
    pdfpool(DOOR=door)
    root = client_for(users["superuser"])
    page = root.get(URL).content.decode()
    block = page.split('class="module pdfpool-door"', 1)[1]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", block)).split())
    assert root.get(URL, {"format": "json"}).json()["door"]["on"] is door
    assert ("budget 256 bodies" in text) is door  # no terms shown for a door not there
    assert ('The door is off (PDFPOOL["DOOR"] is False)' in text) is not door


def test_the_children_block_counts_how_extraction_children_started(pdfpool, users):
    """A cold child without a warm template, a forked one with it; the template's pid."""
    from django_pdfpool.sandbox.extract import child_starts, configure

    def children() -> dict:
        return (
            client_for(users["staff_with_perm"])
            .get(URL, {"format": "json"}, **JSON)
            .json()["children"]
        )

    before = children()
    assert before["template"].startswith("off")
    upload = {"file": SimpleUploadedFile("a.pdf", pdfs.simple(["cold"]), "application/pdf")}
    assert Client().post("/sync/", upload, **JSON).status_code == 200
    assert children()["cold"] == before["cold"] + 1
    configure(warm=True)
    upload = {"file": SimpleUploadedFile("w.pdf", pdfs.simple(["first"]), "application/pdf")}
    assert Client().post("/sync/", upload, **JSON).status_code == 200  # starts the template
    wait_until(lambda: child_starts().template_pid is not None, timeout=30)
    assert children()["template"] == f"pid {child_starts().template_pid}"
    warm = children()
    upload = {"file": SimpleUploadedFile("b.pdf", pdfs.simple(["forked"]), "application/pdf")}
    assert Client().post("/sync/", upload, **JSON).status_code == 200
    assert children()["forked"] == warm["forked"] + 1


def test_a_signed_in_caller_is_shown_by_name(pdfpool, users):
    release = threading.Event()

    async def held():
        while not release.is_set():
            await asyncio.sleep(0.005)

    caller = f"user:{users['staff'].pk}"
    with ThreadPoolExecutor(1) as threads:
        try:
            done = threads.submit(asyncio.run, get_pool().run("k:" + "ab" * 32, caller, held))
            wait_until(lambda: get_pool().running() == 1)
            page = client_for(users["superuser"]).get(URL).content.decode()
        finally:
            release.set()  # whatever failed above: the job ends, the thread is joined
        done.result(timeout=10)
    assert job_rows(page)[0][:2] == ["k:abababababab", "staff"]
    assert f'title="{caller}"' in page


def test_a_caller_naming_no_storable_user_is_shown_as_it_is(pdfpool, users):
    """``user:<pk>`` past what the user table's key can hold (a ``CALLER`` of the project's,
    ``extract_pooled(caller=...)``): no user, and no 500 for the page or its JSON."""
    release = threading.Event()

    async def held():
        while not release.is_set():
            await asyncio.sleep(0.005)

    caller = "user:" + "9" * 30
    client = client_for(users["superuser"])
    with ThreadPoolExecutor(1) as threads:
        try:
            done = threads.submit(asyncio.run, get_pool().run("k:" + "cd" * 32, caller, held))
            wait_until(lambda: get_pool().running() == 1)
            page, data = client.get(URL), client.get(URL, {"format": "json"})
        finally:
            release.set()
        done.result(timeout=10)
    assert (page.status_code, data.status_code) == (200, 200)
    assert job_rows(page.content.decode())[0][:2] == ["k:cdcdcdcdcdcd", caller]
    assert data.json()["jobs"][0]["caller_name"] is None


UUID_USERS = """
import asyncio, sys, threading, time, django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django_pdfpool import get_pool
from django_pdfpool.status.page import status_data

call_command("makemigrations", "uuidusers", verbosity=0)
call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user("uuid-named")
release = threading.Event()

async def held():
    while not release.is_set():
        await asyncio.sleep(0.005)

job = get_pool().run("k:1", f"user:{user.pk}", held)
thread = threading.Thread(target=asyncio.run, args=(job,))
thread.start()
while get_pool().running() != 1:  # the subprocess's timeout bounds it
    time.sleep(0.005)
try:
    print(status_data()["jobs"][0]["caller_name"])
finally:
    release.set()
    thread.join(10)
"""


def test_a_signed_in_caller_is_shown_by_name_whatever_the_user_key(tmp_path):
    """A user model keyed by UUID (as many projects have): ``user:<uuid>`` callers, which
    ``user_or_ip`` and ninja's ``auth_caller`` give, are shown by name too."""
    app = tmp_path / "uuidusers"
    (app / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "migrations" / "__init__.py").write_text("")
    (app / "models.py").write_text(
        "import uuid\n"
        "from django.contrib.auth.models import AbstractUser\n"
        "from django.db import models\n"
        "class User(AbstractUser):\n"
        "    id = models.UUIDField(primary_key=True, default=uuid.uuid4)\n"
    )
    (tmp_path / "uuid_settings.py").write_text(
        "from tests.project.settings import *\n"
        "INSTALLED_APPS = [*INSTALLED_APPS, 'uuidusers']\nAUTH_USER_MODEL = 'uuidusers.User'\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "uuid_settings", "PDFPOOL_JSON": "{}"}
    env["PYTHONPATH"] = os.pathsep.join([root, str(tmp_path)])
    shown = subprocess.run(
        [sys.executable, "-c", UUID_USERS], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "uuid-named"


def test_short_keys_keep_the_job_name_and_twelve_hex_digits():
    digest = hashlib.sha256(b"x").hexdigest()
    assert (
        status_page.short_key(f"tests.project.views.held_job:{digest}") == f"held_job:{digest[:12]}"
    )
    assert status_page.short_key("plain-key") == "plain-key"


def test_formats_match_the_pages_script():
    seconds = (None, 0.0123, 2.34, 42.4, 60, 125)
    assert [status_page.fmt(v, "seconds") for v in seconds] == [
        "no limit", "12 ms", "2.3 s", "42 s", "1 min", "2 min 05 s"
    ]  # fmt: skip
    sizes = (512 << 20, 50 << 20, 1000, 2048)
    assert [status_page.fmt(v, "bytes") for v in sizes] == ["512 MiB", "50 MiB", "1000 B", "2 KiB"]
    leases = (4.96, 0.04, 0.0, -2.0)  # seconds left; ended, not yet reaped
    assert [status_page.fmt(v, "lease") for v in leases] == ["5.0 s", "0.0 s", "ended", "ended"]
    # halves round up, as JavaScript's toFixed does: a figure the page's refresh rewrites
    # must not change (a 2.5 GiB MEMORY_LIMIT is "3 GiB" there)
    halves = [(0.0025, "seconds"), (1.25, "seconds"), (12.5, "seconds"), (5 << 29, "bytes")]
    assert [status_page.fmt(v, kind) for v, kind in halves] == ["3 ms", "1.3 s", "13 s", "3 GiB"]


# --- the recent-activity chart ------------------------------------------------------


def test_the_chart_is_drawn_from_the_history_within_its_window():
    data = {
        "slots": 2,
        "queue": 2,
        "taken_at": 1000.0,
        "history": {
            "interval": 1.0,
            "window": 10.0,
            "t": [989.0, 995.0, 1000.0],  # the first is older than the window
            "running": [2, 1, 2],
            "queued": [2, 0, 1],
            "refused": [5, 0, 3],
        },
    }
    assert status_page.chart(data) == {
        "running": "M300.0,100 L300.0,75.0 L600.0,50.0 L600.0,100 Z",
        "queued": "M300.0,75.0 L300.0,75.0 L600.0,25.0 L600.0,50.0 L300.0,75.0 Z",
        "refused": "M540.0,100 V0.0 h60.0 V100 Z",
        "peak": 3,
        "slots_y": "50.0",
        "window": "10 s",
    }
    data["history"] = {**data["history"], "t": [], "running": [], "queued": [], "refused": []}
    assert status_page.chart(data)["running"] == "" and status_page.chart(data)["peak"] == 0


# --- the history recorder -------------------------------------------------------------


class FakePool:
    """Anything with snapshot() can be recorded."""

    def __init__(self, refused: int = 0) -> None:
        self.running, self.queued, self.refused = 0, 0, refused

    def snapshot(self) -> PoolSnapshot:
        return PoolSnapshot(
            slots=2, queue=2, wait=1.0, closed=False, running=self.running,
            queued=self.queued, jobs=(), counters=Counters(refused_busy=self.refused),
            queue_wait=DurationSummary(), run_time=DurationSummary(), taken_at=1000.0,
        )  # fmt: skip


def test_the_recorder_keeps_refusals_per_sample_in_a_bounded_ring():
    pools = [None]
    recorder = Recorder(lambda: pools[0], size=3)
    assert recorder.sample() is None and recorder.samples() == []
    pools[0] = FakePool(refused=5)
    assert recorder.sample().refused == 0  # a baseline, not a burst of old refusals
    pools[0].refused, pools[0].running, pools[0].queued = 8, 2, 1
    assert recorder.sample() == history.HistoryPoint(1000.0, 2, 1, 3)
    pools[0] = FakePool(refused=2)  # rebuilt: counts from zero
    assert recorder.sample().refused == 2
    pools[0].refused = 2
    recorder.sample()
    assert [s.refused for s in recorder.samples()] == [3, 2, 0]  # the oldest fell out
    assert recorder.as_dict()["refused"] == [3, 2, 0] and recorder.as_dict()["window"] == 3.0


def test_the_recorder_ticks_on_the_job_loop_until_stopped():
    recorder = Recorder(FakePool, interval=0.01, size=1000)
    recorder.start()
    recorder.start()  # idempotent: still one chain of ticks
    try:
        wait_until(lambda: len(recorder.samples()) >= 5, timeout=5)
    finally:
        recorder.stop()
    stopped_at = len(recorder.samples())
    threading.Event().wait(0.1)
    assert len(recorder.samples()) <= stopped_at + 1  # at most the tick already running


def test_a_forked_child_starts_with_an_empty_stopped_recorder():
    recorder = Recorder(FakePool, interval=60)
    recorder.start()
    recorder.sample()
    assert recorder in jobs.forgotten_in_child
    recorder._forget()  # what a fork runs in the child
    assert recorder.samples() == [] and not recorder._ticking
    recorder.start()
    assert recorder._ticking
    recorder.stop()


def test_a_tick_once_the_executors_are_shut_down_ends_the_sampling_quietly():
    """At interpreter exit the executors shut down while the job loop still runs: the tick
    that finds them gone ends the sampling, and says nothing."""
    import asyncio

    recorder = Recorder(FakePool, interval=60)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(loop.shutdown_default_executor())

        async def tick() -> None:
            recorder._tick(recorder._generation)

        loop.run_until_complete(tick())  # raised RuntimeError before
    finally:
        loop.close()
    assert not recorder._ticking


def test_viewing_the_page_starts_the_process_recorder(pdfpool, users):
    configured.recorder.stop()
    client_for(users["superuser"]).get(URL, {"format": "json"})
    assert configured.recorder._ticking


# --- the optional Prometheus endpoint ----------------------------------------------------


def test_the_metrics_endpoint_is_off_unless_routed(pdfpool):
    assert Client().get("/metrics/").status_code == 404


@pytest.mark.urls("tests.project.status_urls")
def test_the_metrics_endpoint_reports_the_snapshot(pdfpool):
    pdfpool(SLOTS=2, QUEUE=2, WAIT=30)
    with held_requests(6) as threads:
        futures = held_scene(threads)
        response = Client().get("/metrics/")
        HELD.release.set()
        assert [f.result(timeout=30).status_code for f in futures] == [200] * 5
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    lines = [line for line in response.content.decode().splitlines() if line[0] != "#"]
    sample = re.compile(r'[a-z_]+(\{[a-z_]+="[^"]*"\})? -?[0-9.e+-]+')
    assert all(sample.fullmatch(line) for line in lines), lines
    values = dict(line.rsplit(" ", 1) for line in lines)
    assert values["pdfpool_running"] == "2" and values["pdfpool_queued"] == "2"
    assert values["pdfpool_slots"] == "2" and values["pdfpool_wait_seconds"] == "30"
    assert values['pdfpool_refused_total{reason="busy"}'] == "1"
    assert values['pdfpool_refused_total{reason="caller_busy"}'] == "1"
    assert values['pdfpool_jobs_total{event="joined"}'] == "1"
    assert values['pdfpool_jobs_total{event="started"}'] == "2"
    assert Client().post("/metrics/").status_code == 405
