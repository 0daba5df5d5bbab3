"""``manage.py pdfpool``: ``status``, ``drain`` and ``extract``, through call_command in this
process and through real ``python -m django`` processes; real extraction children, and a
real redis-server for the cluster's status."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from django_pdfpool import bounds, get_pool
from django_pdfpool.conf import get_settings
from django_pdfpool.exceptions import PoolClosed
from django_pdfpool.management.commands import pdfpool as command
from tests.conftest import held, held_requests, wait_until
from tests.project.views import HELD
from tests.support import pdfs
from tests.support.procs import child_pids, leftovers
from tests.support.redis_server import LEASE, free_port

pytest_plugins = ["tests.support.redis_fixtures"]

ROOT = Path(__file__).resolve().parents[2]
SOON = 60  # seconds: bounds for what should end at once, so that a regression fails


def run(*args: str, **options) -> tuple[str, str]:
    """call_command('pdfpool', *args): its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command("pdfpool", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def manage(*args: str, pdfpool: dict | None = None, cwd: Path | None = None):
    """``python -m django pdfpool ...`` in a process of its own, on the test settings."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.project.settings",
        "PYTHONPATH": str(ROOT),
        "PDFPOOL_JSON": json.dumps(pdfpool or {}),
        "PDFPOOL_TEST_WARM": "",  # cold children (tests/project/settings.py)
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "pdfpool", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SOON,
    )


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def post(url: str, data: bytes, ip: str):
    upload = SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")
    return Client(REMOTE_ADDR=ip).post(url, {"file": upload}, HTTP_ACCEPT="application/json")


def holding(pool, key: str, caller: str, gate: threading.Event) -> threading.Thread:
    """A thread running a job that waits for ``gate``, once the pool runs it."""
    thread = threading.Thread(target=lambda: asyncio.run(pool.run(key, caller, held(1, gate))))
    thread.start()
    wait_until(lambda: pool.running() == 1)
    return thread


def like_the_command(make_pool, settings: dict, **terms):
    """A pool in this process with the terms the command's process has under ``settings``
    (the same project settings), but ``terms``: ``RedisPool``'s arguments."""
    with override_settings(PDFPOOL=settings):
        conf = get_settings()
        mine = {"slots": conf.slots, "queue": conf.queue, "wait": conf.wait}
        mine |= {"lease": conf.redis.lease, "fingerprint": conf.results_tag}
        mine["deployment"] = conf.deployment_tag()
    return make_pool(**mine | terms)


# --- status ---------------------------------------------------------------------------------


def test_status_shows_this_processs_pool_with_its_job_and_counters(pdfpool):
    pdfpool(SLOTS=3, QUEUE=5)
    pool, gate = get_pool(), threading.Event()
    thread = holding(pool, "tests.job:" + "ab" * 32, "ip:203.0.113.7", gate)
    try:
        text, _ = run("status")
        data = json.loads(run("status", json=True)[0])
    finally:
        gate.set()
        thread.join(SOON)
    assert f"PDF pool of process {os.getpid()}" in text
    prose = " ".join(text.split())  # the note is wrapped
    assert "every figure below is this process's" in prose and "built just now" not in prose
    assert "Running  1 of 3 slots" in text
    assert "running  job:abababababab" in text and "ip:203.0.113.7" in text
    assert "Counters of process" in text  # a pool that ran work: its counters are shown
    assert data["scope"] == "process" and data["fresh"] is False
    assert (data["pid"], data["slots"], data["queue"], data["running"]) == (os.getpid(), 3, 5, 1)
    assert [job["state"] for job in data["jobs"]] == ["running"]
    assert data["counters"]["started"] == 1


def test_djangos_own_options_follow_the_action_as_they_follow_any_command(tmp_path):
    """``manage.py pdfpool status --settings=...`` as ``manage.py migrate --settings=...``;
    one given before the ACTION is not undone by the subcommand."""
    after = manage("status", "--settings=tests.project.settings", "-v", "0", cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert after.stdout.startswith("PDF pool of process ")
    missing = str(tmp_path / "missing.pdf")
    for args in (["extract", missing, "--traceback"], ["--traceback", "extract", missing]):
        shown = manage(*args, cwd=tmp_path)
        assert shown.returncode == 1
        assert "Traceback (most recent call last)" in shown.stderr, args
    plain = manage("extract", missing, cwd=tmp_path)
    assert plain.stderr == f"CommandError: Cannot read {missing}: No such file or directory.\n"


def test_status_shows_every_term_at_its_largest(pdfpool):
    """MAX_UPLOAD_SIZE, and SLOTS x MEMORY_LIMIT in the envelope, are printed in GiB: the
    checks pass no value too large to print (10**40 bytes once crashed the command)."""
    largest = bounds.LARGEST
    pdfpool(**dict.fromkeys(["SLOTS", "QUEUE", "MEMORY_LIMIT", "MAX_UPLOAD_SIZE"], largest))
    response = post("/sync/", pdfs.simple(["big terms"]), "203.0.113.9")
    assert response.status_code == 200, response.content
    text, _ = run("status")
    assert f"Running  0 of {largest} slots" in text
    assert json.loads(run("status", json=True)[0])["slots"] == largest


def test_status_escapes_what_would_drive_the_terminal(pdfpool):
    """A caller is any string the project's ``CALLER`` (or ``extract_pooled``) names, a
    header's value say: printed as ``extract`` prints a hostile PDF's metadata."""
    caller = "api:\x1b]0;owned\x07\x1b[31mred\u202etxt.exe"
    gate = threading.Event()
    thread = holding(get_pool(), "tests.job:" + "ef" * 32, caller, gate)
    try:
        text, _ = run("status")
    finally:
        gate.set()
        thread.join(SOON)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "api:\\x1b]0;owned\\x07\\x1b[31mred\\u202etxt.exe" in text


def test_status_prints_a_callers_line_break_escaped_not_as_a_line_of_its_own(pdfpool):
    """A caller (any string ``CALLER`` or ``extract_pooled`` names) cannot add a line that
    passes for the report's own: its line feed is escaped as its other controls are."""
    forged = "State    closed: accepting no new work"
    gate = threading.Event()
    thread = holding(get_pool(), "tests.job:" + "ab" * 32, f"api:x\n{forged}", gate)
    try:
        text, _ = run("status")
    finally:
        gate.set()
        thread.join(SOON)
    assert not [line for line in text.splitlines() if line.startswith(forged)]
    assert f"api:x\\n{forged}" in text


def test_status_from_the_shell_says_its_local_pool_is_its_own_and_empty(tmp_path):
    """A real ``python -m django`` process: the local backend's pool there is that process's,
    built by the command, and the output says so instead of passing for the workers'."""
    shown = manage("status", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    prose = " ".join(shown.stdout.split())  # the note is wrapped
    assert "That is this command's process, whose pool was built just now" in prose
    assert "Jobs in flight: none." in shown.stdout
    assert "Counters of process" not in shown.stdout  # nothing ran: nothing to count
    read = manage("status", "--json", pdfpool={"SLOTS": 4}, cwd=tmp_path)
    data = json.loads(read.stdout)
    assert data["scope"] == "process" and data["fresh"] is True
    assert data["pid"] != os.getpid() and (data["slots"], data["running"]) == (4, 0)
    assert "built just now" in data["note"]


WITHOUT_AUTH = """
import asyncio, threading, time, django
django.setup()
from django.core.management import call_command
from django_pdfpool import get_pool

release = threading.Event()

async def held():
    while not release.is_set():
        await asyncio.sleep(0.005)

threads = [threading.Thread(target=asyncio.run, args=(get_pool().run(key, caller, held),))
           for key, caller in (("k:1", "user:7"), ("k:2", "ip:192.0.2.1"))]
for thread in threads:
    thread.start()
while get_pool().running() != 2:  # the subprocess's timeout bounds it
    time.sleep(0.005)
try:
    call_command("pdfpool", "status")
finally:
    release.set()
    for thread in threads:
        thread.join(10)
"""


def test_status_in_a_project_without_django_contrib_auth_shows_its_callers_as_they_are(
    tmp_path,
):
    """An API project with no user model (django_pdfpool alone installed): the status
    raised ImproperlyConfigured (AUTH_USER_MODEL not installed) naming its callers."""
    (tmp_path / "no_auth_settings.py").write_text(
        "SECRET_KEY = 'x' * 50\nINSTALLED_APPS = ['django_pdfpool']\nUSE_TZ = True\n"
        "PDFPOOL = {'SLOTS': 2}\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "no_auth_settings"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path)])
    for run_it in (["-m", "django", "pdfpool", "status"], ["-c", WITHOUT_AUTH]):
        shown = subprocess.run(
            [sys.executable, *run_it], env=env, cwd=tmp_path, capture_output=True, text=True,
            timeout=SOON,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "PDF pool of process" in shown.stdout
    rows = {line.split()[1]: line.split()[2] for line in shown.stdout.splitlines()[1:]
            if line.startswith("running ")}  # fmt: skip
    assert rows == {"k:1": "user:7", "k:2": "ip:192.0.2.1"}


def test_status_with_redis_reads_the_cluster_from_another_process(
    make_pool, redis_server, namespace, tmp_path
):
    """A job held by a pool in this process; the command, in its own process, sees it in
    Redis, and the process holding it; and leaves no key of its own behind (make_pool
    checks the namespace is empty afterwards)."""
    settings = {"REDIS": {"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": LEASE}}
    other = like_the_command(make_pool, settings)
    gate = threading.Event()
    key = "django_pdfpool.decorators.extract_upload:tag:" + "cd" * 32
    thread = holding(other, key, "ip:198.51.100.4", gate)
    try:
        text = manage("status", pdfpool=settings, cwd=tmp_path)
        as_json = manage("status", "--json", pdfpool=settings, cwd=tmp_path)
    finally:
        gate.set()
        thread.join(SOON)
    assert text.returncode == 0, text.stderr
    assert f"namespace {namespace}" in text.stdout and "mode redis" in text.stdout
    assert "cluster-wide" in " ".join(text.stdout.split())
    assert "running  extract_upload:tag:cdcdcdcdcdcd" in text.stdout
    assert other.process in text.stdout  # the process holding the job
    data = json.loads(as_json.stdout)
    assert data["fresh"] is True and data["cluster"]["mode"] == "redis"
    assert data["scope"] == "cluster"  # counters kept in Redis: the cluster's, shown
    assert "cluster-wide" in data["note"] and "left out" not in data["note"]
    assert "Counters of the cluster:" in text.stdout
    assert data["running"] == 1 and [job["key"] for job in data["jobs"]] == [key]
    holds = {hold["process"]: hold for hold in data["cluster"]["processes"]}
    assert holds[other.process]["running"] == [key]
    local = data["cluster"]["local"]  # the command's own process: it holds nothing
    assert (local["running"], local["queued"]) == (0, 0)


def test_status_with_redis_says_an_ended_lease_has_ended(redis_server, namespace, tmp_path):
    """A process stopped while it holds a job: its lease, past its end until a script reaps
    it, reads "ended", not as a negative duration."""
    from tests.status.test_cluster import ended_lease

    settings = {"REDIS": {"URL": redis_server.url, "NAMESPACE": namespace}}
    with ended_lease(redis_server.url, namespace, lease=5.0) as worker:
        shown = manage("status", pdfpool=settings, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    holds = shown.stdout.split("Processes holding or waiting on something (1):\n", 1)[1]
    row = holds.splitlines()[1].split()
    assert row[1:3] == [str(worker.pid), "ended"], holds


def test_status_with_redis_counts_nothing_for_the_cluster_that_redis_does_not_count(
    make_pool, redis_server, namespace, tmp_path
):
    """Refusals while closed are counted by each process alone: the cluster's counters show
    no figure for them, as the status page does, rather than a 0 nobody counted."""
    settings = {"REDIS": {"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": LEASE}}
    other = like_the_command(make_pool, settings)
    asyncio.run(other.run("k:" + "ef" * 32, "ip:198.51.100.5", lambda: asyncio.sleep(0)))
    shown = manage("status", pdfpool=settings, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    counters = shown.stdout.split("Counters of the cluster:\n", 1)[1].split("\n\n", 1)[0]
    rows = {line[:16].strip(): line[16:].split(None, 1) for line in counters.splitlines()}
    assert rows["Started"][0] == "1" and rows["Completed"][0] == "1", counters
    assert rows["Refused: closed"][0] == "-", counters
    assert "never in Redis" in rows["Refused: closed"][1], counters


@pytest.mark.parametrize(
    ("theirs", "said"),
    [
        ({"deployment": "other-deployment"}, "Another deployment uses the Redis namespace"),
        ({"slots": 7, "lease": 3.0}, "7 there; lease 1 s here, 3 s there"),
    ],
)
def test_status_with_redis_says_the_cluster_refuses_this_processs_settings(
    make_pool, redis_server, namespace, tmp_path, theirs, said
):
    """A live process of the namespace has other terms (another deployment, a rolling
    deploy's other settings): every job of this process is refused ``misconfigured``, and
    the status says so, naming what differs, and exits 3 as ``extract --pool`` does."""
    settings = {"REDIS": {"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": LEASE}}
    other = like_the_command(make_pool, settings, **theirs)
    gate = threading.Event()
    thread = holding(other, "k:" + "ab" * 32, "ip:198.51.100.6", gate)
    try:
        text = manage("status", pdfpool=settings, cwd=tmp_path)
        as_json = manage("status", "--json", pdfpool=settings, cwd=tmp_path)
        pdf = write(tmp_path, "doc.pdf", pdfs.simple(["hello"]))
        extract = manage("extract", pdf, "--pool", pdfpool=settings, cwd=tmp_path)
    finally:
        gate.set()
        thread.join(SOON)
    assert extract.returncode == 3 and "misconfigured" in extract.stderr, extract.stderr
    assert text.returncode == 3 and as_json.returncode == 3, text.stderr
    state = text.stdout.split("State    ", 1)[1].split("\n\n", 1)[0]
    assert "accepting work" not in state and said in " ".join(state.split()), state
    assert said in " ".join(text.stderr.split())
    refused = json.loads(as_json.stdout)["cluster"]["mismatch"]
    assert said in refused and refused == " ".join(state.split()).split(": ", 1)[1]


def test_status_with_redis_unreachable_fails_instead_of_showing_an_idle_cluster(tmp_path):
    settings = {"REDIS": {"URL": f"redis://127.0.0.1:{free_port()}/0"}}
    shown = manage("status", pdfpool=settings, cwd=tmp_path)
    assert shown.returncode == 1
    assert "does not answer" in shown.stderr and "cannot be read" in shown.stderr
    assert shown.stdout == ""


def test_status_with_redis_through_sentinel_asks_the_sentinels_for_the_primary(
    sentinel_set, tmp_path
):
    """With ``SENTINELS`` set, the URL's host names the primary, not a host: the check
    before the reading finds it through the Sentinels, as the pool does."""
    sentinels = [f"{host}:{port}" for host, port in sentinel_set.sentinels]
    settings = {"REDIS": {"URL": sentinel_set.url, "SENTINELS": sentinels}}
    shown = manage("status", pdfpool=settings, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "mode redis" in shown.stdout


# --- drain ----------------------------------------------------------------------------------


def test_drain_from_the_shell_refuses_to_pretend(tmp_path):
    """A separate process has no pool: it can drain nothing, and says so with exit 1."""
    shown = manage("drain", cwd=tmp_path)
    assert shown.returncode == 1
    assert "cannot drain the pools of other processes" in shown.stderr


def test_drain_through_call_command_without_a_pool_has_nothing_to_do(monkeypatch):
    monkeypatch.setattr(command, "peek_pool", lambda: None)
    out, _ = run("drain")
    assert f"No pool was built in process {os.getpid()}: nothing to drain." in out


def test_drain_lets_a_running_extraction_finish_then_refuses_new_work(pdfpool):
    """In a process that owns the pool: call_command drains it. The held job (a real
    extraction once let go) finishes and answers; the pool then accepts nothing."""
    pdfpool(SLOTS=1)
    HELD.reset(extract=True)
    pool = get_pool()
    with held_requests(2) as threads:
        request = threads.submit(post, "/held/sync/", pdfs.simple(["drained text"]), "10.0.0.1")
        wait_until(lambda: pool.running() == 1)
        drain = threads.submit(run, "drain", timeout=60)  # as a shutdown hook would
        wait_until(lambda: pool.snapshot().closed)
        assert not drain.done()  # waiting for the job
        late = post("/sync/", pdfs.simple(["too late"]), "10.0.0.2")
        assert late.status_code == 503 and late.json()["error"] == PoolClosed.code
        HELD.release.set()
        out, _ = drain.result(timeout=SOON)
        answer = request.result(timeout=SOON)
    assert "1 running and 0 queued jobs" in out and "Drained in" in out
    assert answer.status_code == 200 and "drained text" in answer.json()["pdf"]["text"]
    assert pool.snapshot().counters.completed == 1


def test_drain_that_runs_out_of_time_stops_the_extraction_and_its_child(pdfpool):
    pdfpool(SLOTS=1, TIMEOUT=120.0)
    pool, before = get_pool(), child_pids()
    with held_requests(1) as threads:
        request = threads.submit(post, "/sync/", pdfs.slow_pdf("drain", megabytes=40), "10.0.0.3")
        wait_until(lambda: pool.running() == 1 and child_pids() - before)
        with pytest.raises(CommandError, match="ran out of time") as refused:
            run("drain", "--timeout", "0.2")
        answer = request.result(timeout=SOON)
    assert refused.value.returncode == command.EXIT_REFUSED
    assert answer.status_code == 503 and answer.json()["error"] == PoolClosed.code
    assert pool.snapshot().counters.cancelled == 1
    assert leftovers(before) == set()  # the child was killed and reaped


def test_drain_of_an_idle_pool_with_no_time_at_all_is_done_not_out_of_time(pdfpool):
    """``--timeout 0``: stop now. Nothing ran, so nothing was stopped (it said so, exit 3)."""
    pool = get_pool()
    out, _ = run("drain", "--timeout", "0")
    assert "Drained in " in out and pool.snapshot().closed


def test_drain_refuses_to_block_an_event_loop(pdfpool):
    get_pool()

    async def from_async_code() -> None:
        run("drain")

    with pytest.raises(CommandError, match=r"await django_pdfpool\.adrain_pool"):
        asyncio.run(from_async_code())
    assert not get_pool().snapshot().closed


def test_drain_timeout_must_be_seconds(pdfpool):
    get_pool()  # read once there is a pool to drain
    for wrong in ("-1", "inf", "soon"):
        with pytest.raises(CommandError, match=r"--timeout must be seconds >= 0|invalid float"):
            run("drain", "--timeout", wrong)
    with pytest.raises(CommandError) as refused:
        run("drain", "--timeout", "-1")
    assert refused.value.returncode == 2  # a wrong argument (docs/command.md)


def test_drain_by_default_waits_what_the_settings_give_past_what_the_option_takes(pdfpool):
    """With WAIT None the default is ceil(QUEUE / SLOTS) x TIMEOUT: over 1e9 seconds here."""
    pdfpool(SLOTS=1, QUEUE=4, WAIT=None, TIMEOUT=1e9)
    get_pool()
    out = io.StringIO()
    call_command("pdfpool", "drain", stdout=out)
    assert "Drained in " in out.getvalue()


# --- extract --------------------------------------------------------------------------------


def test_extract_prints_the_text_and_figures_from_a_real_child(pdfpool, tmp_path):
    data = pdfs.simple(["first page text", "second page text"], title="Quarterly report")
    path = write(tmp_path, "report.pdf", data)
    before = child_pids()
    out, err = run("extract", path)
    assert hashlib.sha256(data).hexdigest() in out
    assert "2 in the document, 2 extracted" in out and "truncated      no" in out
    assert "meta Title     Quarterly report" in out
    assert "first page text\n\nsecond page text" in out
    assert "engine pypdf, timeout 30 s, memory limit 512 MiB" in out
    assert err == ""  # a small file: no progress lines
    assert leftovers(before) == set()  # a cold child, reaped; no template left behind


def test_extract_json_and_the_settings_limits(pdfpool, tmp_path):
    pdfpool(MAX_PAGES=1)
    path = write(tmp_path, "three.pdf", pdfs.simple(["one", "two", "three"]))
    data = json.loads(run("extract", path, "--json")[0])
    assert (data["page_count"], data["pages"], data["truncated"]) == (3, ["one"], True)
    assert data["file"] == path and data["engine"] == "pypdf"


def test_extract_the_timeout_setting_ends_a_slow_pdf(pdfpool, tmp_path):
    pdfpool(TIMEOUT=0.5)
    path = write(tmp_path, "slow.pdf", pdfs.cpu_bomb())
    with pytest.raises(CommandError, match="too_complex") as refused:
        run("extract", path)
    assert refused.value.returncode == command.EXIT_REFUSED


def test_extract_prints_the_error_code_and_exits_3(pdfpool, tmp_path):
    path = write(tmp_path, "locked.pdf", pdfs.aes256_unknown_password())
    with pytest.raises(CommandError, match="encrypted: This PDF is protected by a password"):
        run("extract", path)
    out = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("pdfpool", "extract", path, "--json", stdout=out)
    assert refused.value.returncode == 3
    assert json.loads(out.getvalue())["error"]["code"] == "encrypted"
    html = write(tmp_path, "page.pdf", pdfs.html())
    with pytest.raises(CommandError, match="not_a_pdf"):
        run("extract", html)


def test_extract_refuses_a_file_over_max_upload_size_before_any_child(pdfpool, tmp_path):
    pdfpool(MAX_UPLOAD_SIZE=100)
    path = write(tmp_path, "big.pdf", pdfs.simple(["x" * 50]))
    before = child_pids()
    with pytest.raises(
        CommandError, match=r"too_large: PDFs up to 100 bytes are accepted"
    ) as refused:
        run("extract", path)
    assert refused.value.returncode == 3 and not child_pids() - before  # none started


def test_extract_holds_the_sandbox_settings_as_uploads_do(pdfpool, tmp_path):
    """SANDBOX["REQUIRE"] fails closed for the command too, even where the system checks do
    not run first (call_command, --skip-checks): refused with the pool's code, exit 3."""
    from django_pdfpool import sandbox

    path = write(tmp_path, "doc.pdf", pdfs.simple(["never read"]))
    # "landlock": the refusal's reason is logged once per finding and process, and
    # tests/sandbox/test_confine.py reads the log of "basic"'s
    pdfpool(SANDBOX={"LAYERS": False, "REQUIRE": "landlock"})
    try:
        with pytest.raises(CommandError, match="sandbox_unavailable") as refused:
            run("extract", path)
        assert refused.value.returncode == command.EXIT_REFUSED
    finally:
        sandbox.configure(sandbox=True, require="none")


def test_extract_engine_option(pdfpool, tmp_path):
    pytest.importorskip("pypdfium2")
    path = write(tmp_path, "doc.pdf", pdfs.simple(["engine choice"]))
    data = json.loads(run("extract", path, "--engine", "pypdfium2", "--json")[0])
    assert data["engine"] == "pypdfium2" and "engine choice" in data["text"]
    with pytest.raises(CommandError, match="invalid choice"):
        run("extract", path, "--engine", "poppler")


def test_extract_pool_with_an_empty_caller_is_a_wrong_argument(pdfpool, tmp_path):
    """Exit 2, as docs/command.md says of a wrong argument; no job runs."""
    path = write(tmp_path, "doc.pdf", pdfs.simple(["hello"]))
    for given in (["--caller", ""], []):
        options = {} if given else {"caller": ""}  # call_command's keyword, unparsed
        with pytest.raises(CommandError, match="--caller must name a caller") as refused:
            run("extract", path, "--pool", *given, **options)
        assert refused.value.returncode == 2
    assert get_pool().snapshot().counters.started == 0


def test_extract_pool_with_another_engine_is_a_wrong_argument(pdfpool, tmp_path):
    """``--pool`` runs the pool's job, with the ENGINE setting: ``--engine`` naming another
    is a wrong argument (exit 2), as an empty ``--caller`` is; no job runs."""
    path = write(tmp_path, "doc.pdf", pdfs.simple(["hello"]))
    with pytest.raises(CommandError, match="with the ENGINE setting") as refused:
        run("extract", path, "--pool", "--engine", "pypdfium2")
    assert refused.value.returncode == 2
    assert get_pool().snapshot().counters.started == 0


def test_extract_caller_without_pool_is_a_wrong_argument(pdfpool, tmp_path):
    """``--caller`` names the pool's caller: without ``--pool`` the file would be read outside
    the pool, taking no slot, as nobody asked; exit 2 and no child starts."""
    path = write(tmp_path, "doc.pdf", pdfs.simple(["hello"]))
    before = child_pids()
    with pytest.raises(CommandError, match="--caller goes with --pool") as refused:
        run("extract", path, "--caller", "ops:alice")
    assert refused.value.returncode == 2 and not child_pids() - before


def test_extract_a_missing_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match="No such file") as failed:
        run("extract", str(tmp_path / "absent.pdf"))
    assert failed.value.returncode == 1


def test_extract_reads_what_the_command_may_read_not_what_the_child_may(tmp_path):
    """The file is opened by the command, as ``--pool`` opens it: a file the command may read
    is extracted even where the sandboxed child could not open it (root's access to a mode 0
    file is not the child's), and one it may not is exit 1, never a PDF that crashed."""
    path = write(tmp_path, "private.pdf", pdfs.simple(["private text"]))
    os.chmod(path, 0)
    try:
        open(path, "rb").close()
    except PermissionError:
        readable = False
    else:
        readable = True
    for pooled in ([], ["--pool"]):
        shown = manage("extract", path, *pooled, cwd=tmp_path)
        if readable:
            assert shown.returncode == 0, (pooled, shown.stderr)
            assert "private text" in shown.stdout
        else:
            assert shown.returncode == 1, (pooled, shown.stderr)
            assert shown.stderr == f"CommandError: Cannot read {path}: Permission denied.\n"


def test_extract_escapes_what_would_drive_the_terminal(pdfpool, tmp_path):
    title = "\x1b]0;owned\x07\x1b[31mred\u202etxt.exe"
    hexed = ("\ufeff" + title).encode("utf-16-be").hex().encode()
    objects = pdfs.document([pdfs.text_ops("body")])
    objects.append(b"<< /Title <%s> >>" % hexed)
    data = pdfs.assemble(objects, trailer=b"/Root 1 0 R /Info %d 0 R" % len(objects))
    out, _ = run("extract", write(tmp_path, "title.pdf", data))
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b[31mred\\u202etxt.exe" in out


def large_slow_pdf() -> bytes:
    """Over a MiB on disk (incompressible filler nobody reads) and a few seconds of work."""
    ops = b"BT /F1 12 Tf (large) Tj " + b"1 0 0 1 72 720 Tm (a) Tj " * ((1 << 20) // 25) + b"ET"
    objects = pdfs.document([b""])
    objects[4] = pdfs.stream(zlib.compress(ops, 6), b"/Filter /FlateDecode ")
    objects.append(pdfs.stream(os.urandom(command.PROGRESS_BYTES)))
    return pdfs.assemble(objects)


def test_extract_a_large_file_shows_progress_on_stderr(tmp_path):
    """A real ``python -m django`` process: progress lines go to stderr while the child
    works, the result to stdout."""
    path = write(tmp_path, "large.pdf", large_slow_pdf())
    slow = {"TIMEOUT": 120.0}  # a few seconds alone, far longer on a machine kept busy
    quiet_args = ("extract", path, "--no-progress", "--json")  # as slow: nothing said
    with ThreadPoolExecutor(1) as runner:  # both at once: processes of their own, a job each
        quietly = runner.submit(manage, *quiet_args, pdfpool=slow, cwd=tmp_path)
        shown = manage("extract", path, pdfpool=slow, cwd=tmp_path)
        quiet = quietly.result()
    assert shown.returncode == 0, shown.stderr
    lines = shown.stderr.splitlines()
    assert lines[0].startswith(f"{path} (1 MiB): extracting with engine pypdf")
    assert any("still extracting, " in line for line in lines[1:]), lines
    assert "large" in shown.stdout and "1 in the document, 1 extracted" in shown.stdout
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["page_count"] == 1


def test_extract_from_the_shell_exits_3_with_the_code_on_stderr(tmp_path):
    path = write(tmp_path, "locked.pdf", pdfs.aes256_unknown_password())
    shown = manage("extract", path, cwd=tmp_path)
    assert shown.returncode == 3
    assert "encrypted: This PDF is protected by a password." in shown.stderr


def test_status_shows_the_memory_envelope_and_recent_jobs_peaks(pdfpool):
    from django_pdfpool.sandbox import extract as extraction
    from django_pdfpool.status.envelope import memory_allowed
    from django_pdfpool.status.page import fmt
    from tests.support import hungry
    from tests.support.sandbox import run as extract

    pdfpool(SLOTS=2, MEMORY_LIMIT=256 << 20)
    extraction.register_engine(hungry.ENGINE)
    extract(hungry.document(80, "status"), engine=hungry.ENGINE, warm=False)
    out, _ = run("status")
    allowed, source = memory_allowed()
    block = out[out.index("Memory envelope of process") :]
    lines = {line.split("  ")[0]: line.split() for line in block.splitlines()}
    assert " ".join(lines["May use"][2:]) == f"{fmt(allowed, 'bytes')} ({source})"
    assert lines["Slots x memory limit"][-2:] == ["512", "MiB"]
    assert "Server RSS now" in lines and "Children RSS now" in lines
    _, peak, unit, start = (
        block.split("Recent jobs' peak RSS (")[1].splitlines()[2].split()
    )  # newest
    assert start == "cold" and (int(peak) >= 80 if unit == "MiB" else unit == "GiB"), block
    data = json.loads(run("status", "--json")[0])["memory"]
    assert data["pool"] == 512 << 20 and data["recent_jobs"][0]["peak_rss"] >= 80 << 20


@pytest.mark.django_db
def test_status_tells_when_a_job_ended_in_the_time_zone_of_the_page(
    pdfpool, admin_client, settings
):
    """The recent jobs' end times read as on the status page: in Django's current time zone,
    not in UTC (the same job shown at two times, neither saying which zone)."""
    from tests.support.sandbox import run as extract

    settings.TIME_ZONE = "Asia/Kathmandu"  # UTC+05:45: no other zone shows the same clock
    extract(pdfs.simple(["when"]), warm=False)
    out, _ = run("status")
    ended = out.split("Recent jobs' peak RSS (")[1].splitlines()[2].split()[0]  # newest
    page = admin_client.get("/admin/django_pdfpool/poolstatus/").content.decode()
    shown = page.split('id="pdfpool-peaks">')[1].split("<td>")[1].split("</td>")[0]
    assert ended == shown


def test_status_says_new_work_is_refused_as_the_page_says_it(pdfpool):
    """Below ``SANDBOX["REQUIRE"]`` every extraction is refused: the state says so, in the
    status page's words, not "accepting" ("landlock": tests/sandbox reads the log of
    "basic"'s refusal, logged once per process)."""
    pdfpool(SANDBOX={"LAYERS": False, "REQUIRE": "landlock"})
    out, _ = run("status")
    assert "State    refusing extractions: sandbox below" in out
