"""Issue 14's sandbox findings: the text bomb (a cap on the text, the parent's memory), the
children's environment, and one immutable result for every sharer."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from django_pdfpool import extraction
from django_pdfpool.conf import DEFAULTS
from django_pdfpool.extraction import Extraction, ExtractionError, extract
from django_pdfpool.sandbox.child_process import BASE_ENV
from django_pdfpool.sandbox.engines import TextBudget, extract_pages, fit, json_size
from django_pdfpool.sandbox.wire import DEFAULT_MAX_TEXT_BYTES, answer_limit
from tests import pdfs
from tests.conftest import until, wait_until

LIMITS = {"timeout": 20.0, "memory_limit": 512 << 20}
ROOT = Path(__file__).resolve().parents[1]


def run(source, **options):
    return asyncio.run(extract(source, **{**LIMITS, **options}))


# --- finding 1: the text bomb ----------------------------------------------------------------

BOMB_PROBE = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from django_pdfpool.conf import DEFAULTS
    from django_pdfpool.extraction import configure, extract
    from tests import pdfs

    def hwm():
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM"))

    data = pdfs.text_bomb()
    configure(warm=False)
    gc.collect()
    before = hwm()
    # extract()'s own defaults: MAX_TEXT_BYTES's (checked below)
    result = asyncio.run(extract(data, timeout=60.0, memory_limit=DEFAULTS["MEMORY_LIMIT"]))
    size = len(result.text.encode())  # the joined text counts too
    print(json.dumps({"growth": hwm() - before, "file": len(data), "text_bytes": size,
                      "truncated": result.truncated,
                      "text_truncated": getattr(result, "text_truncated", None)}))
    """
)


def test_a_text_bomb_grows_the_parent_by_less_than_96_mib():
    """17 KB that show 16 M emoji (64 MB of UTF-8): with the default settings the answer is
    cut at MAX_TEXT_BYTES and the parent's peak resident set grows by under 96 MiB."""
    proc = subprocess.run(
        [sys.executable, "-c", BOMB_PROBE],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    print(found)
    assert found["file"] < 20_000
    assert found["growth"] < 96 << 20, found
    assert found["truncated"] and found["text_truncated"]
    assert DEFAULTS["MAX_TEXT_BYTES"] - 16 <= found["text_bytes"] <= DEFAULTS["MAX_TEXT_BYTES"]


def test_the_sandbox_default_cap_is_the_settings_default():
    assert DEFAULTS["MAX_TEXT_BYTES"] == DEFAULT_MAX_TEXT_BYTES


@pytest.mark.parametrize("engine", ["pypdf", "pypdfium2"])
def test_text_over_the_cap_comes_back_cut_and_flagged(engine, tmp_path):
    if engine == "pypdfium2":
        pytest.importorskip("pypdfium2")
    extraction.configure(tmp_dir=tmp_path)
    data = pdfs.simple(["a" * 1500, "b" * 1500, "c" * 1500])
    whole = run(data, engine=engine)
    assert not whole.truncated and not whole.text_truncated and len(whole.pages) == 3
    cut = run(data, engine=engine, max_text_bytes=2048)
    assert cut.truncated and cut.text_truncated and cut.page_count == 3
    assert cut.pages[0] == whole.pages[0]
    assert len(cut.pages) == 2 and whole.pages[1].startswith(cut.pages[1]) and cut.pages[1]
    assert 2000 <= len(cut.text.encode()) <= 2048
    extraction.configure(tmp_dir=None)


def test_max_pages_alone_leaves_text_truncated_false(tmp_path):
    extraction.configure(tmp_dir=tmp_path)
    result = run(pdfs.simple(["one", "two"]), max_pages=1)
    assert result.truncated and not result.text_truncated
    extraction.configure(tmp_dir=None)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_max_text_bytes_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError):
        run(pdfs.simple(["x"]), max_text_bytes=bad)


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii " * 50,
        "\U0001f4a3" * 300,
        'quotes " and \\ ' * 40,
        "\x01\n\t" * 200,
        "caf\u00e9 \u4e2d\u6587 " * 80,
        "lone \ud800 surrogate " * 40,
    ],
)
def test_a_cut_page_fits_its_room_and_is_a_prefix(text):
    for room in (0, 1, 5, 6, 7, 100, 333, 1000):
        part = fit(text, room)
        assert text.startswith(part) and json_size(part) <= room
        if json_size(text) > room:
            assert json_size(part) > room - 6  # short of the room by one character at most
    budget = TextBudget(500)
    while budget.add(text):
        pass
    pages = json.dumps(budget.pages, ensure_ascii=False, separators=(",", ":"))
    assert budget.cut and len(pages.encode("utf-8", "surrogatepass")) <= 500 + 2


def test_the_engine_stops_reading_pages_once_the_cap_is_spent():
    data = pdfs.simple([f"page {i} " + "x" * 100 for i in range(50)])
    found = extract_pages("pypdf", data, max_pages=None, refuse=False, max_text_bytes=1024)
    assert len(found["pages"]) <= 10 and found["text_truncated"] and found["truncated"]
    assert found["page_count"] == 50


FAKE_CHILD = """#!/bin/sh
# Stands in for the interpreter: says ready, reads the job, answers with far too much.
printf 'ready\\n'
read job
printf 'started\\n'
head -c {size} /dev/zero | tr '\\0' 'a' | sed 's/^/{{"ok":true,"pages":["/'
printf '"]}}\\n'
"""


def test_the_parent_refuses_an_answer_over_the_cap_plus_overhead(tmp_path):
    """A child that ignores the cap (a compromised one) is killed once its answer passes the
    text cap plus the metadata's and fields' overhead: too_large, never read whole."""
    fake = tmp_path / "python"
    cap = 4096
    fake.write_text(FAKE_CHILD.format(size=answer_limit(cap) + (1 << 20)))
    fake.chmod(0o755)
    extraction.configure(python=str(fake), warm=False)
    try:
        with pytest.raises(ExtractionError) as caught:
            run(pdfs.simple(["x"]), max_text_bytes=cap, warm=False)
        assert caught.value.code == "too_large"
    finally:
        extraction.configure(python=sys.executable, warm=True)


# --- finding 4: the children's environment ----------------------------------------------------


def wait_for_spare(timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not extraction.idle_pids():
        assert time.monotonic() < deadline, "no spare started"
        time.sleep(0.01)
    return extraction.idle_pids()[0]


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_children_get_a_minimal_environment_and_the_names_passed(monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "not-for-children")
    monkeypatch.setenv("DATABASE_URL", "postgres://app:hunter2@db/app")
    monkeypatch.setenv("PYTHONSTARTUP", "/nowhere.py")
    monkeypatch.setenv("PDFPOOL_PASSED", "yes")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    extraction.configure(warm=False, child_env=("PDFPOOL_PASSED",))
    try:
        extraction.configure(warm=True)
        extraction.prewarm()
        env = environ_of(wait_for_spare())
        assert "DJANGO_SECRET_KEY" not in env and "DATABASE_URL" not in env
        assert "PYTHONSTARTUP" not in env
        assert env["PDFPOOL_PASSED"] == "yes" and env["LC_ALL"] == "C.UTF-8"
        assert set(env) <= {*BASE_ENV, "PDFPOOL_PASSED"} | {k for k in env if k[:3] == "LC_"}
        assert run(pdfs.simple(["still works"])).text == "still works"
    finally:
        extraction.configure(child_env=())
    extraction.prewarm()
    env = environ_of(wait_for_spare())  # the spare of the old environment was replaced
    assert "PDFPOOL_PASSED" not in env


def test_child_env_names_are_checked():
    with pytest.raises(ValueError):
        extraction.configure(child_env=("A=B",))


def test_the_pool_passes_child_env_from_the_settings(pdfpool, monkeypatch):
    from django_pdfpool import get_pool
    from django_pdfpool.sandbox import extract as sandbox

    pdfpool(CHILD_ENV=["PDFPOOL_FROM_SETTINGS"])
    get_pool()
    assert sandbox._template.env == ("PDFPOOL_FROM_SETTINGS",)
    pdfpool()
    get_pool()
    assert sandbox._template.env == ()


# --- finding 8: one immutable result for every sharer -----------------------------------------


def an_extraction(**changes) -> Extraction:
    values = dict(
        sha256="0" * 64,
        page_count=2,
        pages=["one", "two"],
        metadata={"Title": "t"},
        truncated=False,
        elapsed=0.1,
        peak_rss=1 << 20,
    )
    return Extraction(**{**values, **changes})


def test_an_extraction_cannot_be_changed_in_place():
    pdf = an_extraction()
    assert pdf.pages == ("one", "two") and pdf.text == "one\n\ntwo"
    with pytest.raises(AttributeError):
        pdf.pages.append("three")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        pdf.pages[0] = "changed"  # type: ignore[index]
    for change in (
        lambda m: m.__setitem__("Title", "x"),
        lambda m: m.__delitem__("Title"),
        lambda m: m.update(x="y"),
        lambda m: m.setdefault("x", "y"),
        lambda m: m.pop("Title"),
        lambda m: m.popitem(),
        lambda m: m.clear(),
    ):
        with pytest.raises(TypeError):
            change(pdf.metadata)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pdf.pages = ()  # type: ignore[misc]
    assert pdf == an_extraction() and dict(pdf.metadata) == {"Title": "t"}


def test_an_extraction_round_trips_json_pickle_and_copies():
    pdf = an_extraction(text_truncated=True, truncated=True)
    plain = pdf.as_dict()
    assert plain["pages"] == ["one", "two"] and plain["text"] == "one\n\ntwo"
    assert json.loads(json.dumps(plain)) == plain
    assert Extraction.from_dict(json.loads(json.dumps(plain))) == pdf
    assert "text" not in pdf.as_dict(text=False)
    assert json.dumps(pdf.metadata) == '{"Title": "t"}'
    assert dataclasses.asdict(pdf)["metadata"] == {"Title": "t"}
    for again in (pickle.loads(pickle.dumps(pdf)), copy.deepcopy(pdf), copy.copy(pdf)):
        assert again == pdf and again.text == pdf.text
        with pytest.raises(TypeError):
            again.metadata["x"] = "y"  # type: ignore[index]


def test_the_redis_codec_round_trips_an_extraction():
    from django_pdfpool.configured import _decode_result, _encode_result

    pdf = an_extraction()
    wire = json.loads(json.dumps(_encode_result(pdf)))
    assert "text" not in wire["extraction"]
    assert _decode_result(wire) == pdf


def test_sharers_get_equal_results_none_can_change(tmp_path):
    """Two callers sharing one job: the same answer for both; a view changing its pages or
    metadata in place fails instead of changing the other's."""
    from django_pdfpool.admission.local import Pool

    extraction.configure(tmp_dir=tmp_path)
    data = pdfs.simple(["shared page", "second"])

    async def both():
        pool = Pool(1, 1, None)

        async def job():  # on the pool's job loop: waits for the second caller to join
            await until(lambda: pool.waiting("doc") == 1)
            return await extract(data, **LIMITS)

        first = asyncio.create_task(pool.run("doc", "alice", job))
        await until(lambda: pool.running() == 1)
        second = await pool.run("doc", "bob", None)
        return await first, second

    try:
        first, second = asyncio.run(both())
    finally:
        extraction.configure(tmp_dir=None)
    assert first == second and first.pages == ("shared page", "second")
    with pytest.raises((TypeError, AttributeError)):
        first.pages.append("mine")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        first.metadata["Title"] = "mine"  # type: ignore[index]
    assert second.pages == ("shared page", "second")


# --- issue 21: a child nothing can escape -----------------------------------------------------

from tests.escape_kit import ENGINE as KIT  # noqa: E402
from tests.escape_kit import document as kit_document  # noqa: E402


def require_full_sandbox() -> None:
    """Skip where this host does not give every layer (a container's default seccomp profile
    refuses namespaces, say); under CI=true fail instead: CI's kernel has them all."""
    from tests.ci_strict import in_ci

    layers = extraction.sandbox_layers()
    if layers.level != "full":
        reason = f"this host gives the sandbox level {layers.level!r}: {dict(layers.missing)}"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def targets(tmp_path, monkeypatch):
    """What the kit aims at: another process of the server's user (with a secret in its
    environment and a pipe as its stdout), the server itself, a loopback listener, a
    directory to create a file in, and a file of the server's user the job was not given."""
    monkeypatch.setenv("PDFPOOL_SERVER_SECRET", "hunter2")
    victim = subprocess.Popen(
        ["sleep", "120"], stdout=subprocess.PIPE, env={"VICTIM_SECRET": "s3cret"}
    )
    listener = __import__("socket").create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    directory = tmp_path / "open-to-the-server"
    directory.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's own file")
    # another caller's staged PDF, beside the kit's own copy (byte sources go to tempfile's)
    neighbour_fd, neighbour = tempfile.mkstemp(prefix="pdfpool-", suffix=".pdf")
    os.write(neighbour_fd, b"%PDF- another caller's upload")
    os.close(neighbour_fd)
    # a project on the children's PYTHONPATH (PYTHONPATH=/app, as in many Docker images)
    project = tmp_path / "app"
    project.mkdir()
    (project / "settings.py").write_text('SECRET_KEY = "the project\'s own"\n')
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(project), os.environ.get("PYTHONPATH")) if p)
    )
    extraction.register_engine(KIT)
    extraction.configure(warm=False)  # the template and spares of the old PYTHONPATH go
    extraction.configure(warm=True)  # a test before may have left the template off
    yield {
        "victim": victim.pid,
        "server": os.getpid(),
        "port": listener.getsockname()[1],
        "directory": str(directory),
        "secret": str(secret),
        "neighbour": neighbour,
        "planted": str(project / "settings.py"),
        "listener": listener,
        "victim_proc": victim,
    }
    victim.kill()
    victim.wait()
    listener.close()
    os.unlink(neighbour)
    monkeypatch.undo()  # the old PYTHONPATH back, for the children that come next
    extraction.configure(sandbox=True, warm=False)
    extraction.configure(warm=True)


def run_kit(targets: dict, warm: bool, **extra) -> dict[str, str]:
    aims = {k: v for k, v in targets.items() if k not in ("listener", "victim_proc")}
    data = kit_document(**aims, **extra)
    for _ in range(50):  # a forked child once the template has the kit preloaded
        result = run(data, engine=KIT, warm=warm)
        if result.child_start == ("forked" if warm else "cold"):
            return json.loads(result.pages[0])
        wait_until(lambda: bool(extraction.idle_pids()), timeout=30)
    raise AssertionError("no forked child took the kit")


def connections(listener) -> int:
    count = 0
    while True:
        try:
            listener.accept()[0].close()
            count += 1
        except BlockingIOError:
            return count


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "sandbox-off"])
def test_the_escape_kit_gets_nowhere_unless_the_sandbox_is_off(targets, warm, sandbox):
    """Signal another process and the server, read their environ, open another process's fd
    for writing, change another process's limits, priority, scheduling, CPUs, I/O priority
    or memory placement (the victim's, the server's), ptrace the parent, connect to loopback,
    create a file, run a program (and execve itself), read a file not given or one in a
    project on PYTHONPATH: every attempt refused in a sandboxed child; with the sandbox off
    (as before issue 21) the same kit gets out, so the test can fail."""
    from tests.escape_kit import VICTIM_NOFILE
    from tests.procs import rlimits

    if sandbox:
        require_full_sandbox()
    extraction.configure(sandbox=sandbox)
    victim_nofile = rlimits(targets["victim"])["Max open files"]
    report = run_kit(targets, warm)
    print(report)
    expected = {
        "signal", "environ", "open_fd", "server_environ", "signal_server", "ptrace_parent",
        "connect", "create", "exec", "execve", "read", "neighbour", "planted",
        "prlimit", "affinity", "scheduler", "sched_param", "sched_attr", "ioprio",
        "move_pages", "migrate_pages", "prlimit_server", "renice_server",
    }  # fmt: skip
    assert set(report) == expected
    created = list(Path(targets["directory"]).iterdir())
    reached = connections(targets["listener"])
    nofile = rlimits(targets["victim"])["Max open files"]
    if sandbox:
        assert all(outcome.startswith("refused") for outcome in report.values()), report
        assert created == [] and reached == 0
        assert nofile == victim_nofile  # its limit as it was
    else:
        assert all(outcome.startswith("escaped") for outcome in report.values()), report
        assert created and reached  # (the first run may have been cold: as many as runs)
        assert nofile == str(VICTIM_NOFILE)  # the call did change another process
    assert targets["victim_proc"].poll() is None  # SIGCONT harms nobody: it lives on


def test_the_layers_are_reported_and_a_sandboxed_child_shows_them():
    require_full_sandbox()
    layers = extraction.sandbox_layers()
    assert layers.enabled and layers.level == "full", layers
    assert layers.landlock_abi >= 6 and not layers.missing
    extraction.configure(warm=False)
    try:
        seen = inspect_a_busy_child()
    finally:
        extraction.configure(warm=True)
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2", seen
    assert int(seen["Seccomp_filters"]) >= 2  # the start-up filter and the job's
    for kind in ("user", "net", "ipc"):  # namespaces of its own, not the server's
        assert seen[f"ns/{kind}"] != os.readlink(f"/proc/self/ns/{kind}"), kind


def inspect_a_busy_child() -> dict[str, str]:
    from tests.procs import child_pids, rlimits

    async def scenario() -> dict[str, str]:
        mine = child_pids() - set(extraction.idle_pids())
        task = asyncio.ensure_future(extract(pdfs.slow_pdf("busy", 3), **LIMITS))
        while True:
            for pid in child_pids() - mine - set(extraction.idle_pids()):
                if rlimits(pid).get("Max address space") == str(LIMITS["memory_limit"]):
                    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
                    found = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
                    for kind in ("user", "net", "ipc"):
                        found[f"ns/{kind}"] = os.readlink(f"/proc/{pid}/ns/{kind}")
                    task.cancel()
                    return found
            assert not task.done()
            await asyncio.sleep(0.01)

    return asyncio.run(scenario())


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "sandbox-off"])
def test_another_jobs_child_cannot_forge_this_jobs_answer(targets, sandbox, tmp_path):
    """The forgery of issue 21, end to end: while a victim's job runs, a hostile document in
    another job's child writes a forged answer into /proc/<victim's child>/fd/1. Sandboxed:
    refused, the victim gets its own text. Off: the victim gets the forged pages."""
    from tests.procs import child_pids, rlimits

    if sandbox:
        require_full_sandbox()
    extraction.configure(sandbox=sandbox)

    async def scenario():
        mine = child_pids() - set(extraction.idle_pids())
        victim = asyncio.ensure_future(extract(pdfs.slow_pdf("victim", 4), **LIMITS))
        pid = None
        while pid is None:
            assert not victim.done()
            for candidate in child_pids() - mine - set(extraction.idle_pids()):
                if rlimits(candidate).get("Max address space") == str(LIMITS["memory_limit"]):
                    pid = candidate
            await asyncio.sleep(0.01)
        data = kit_document(forge=pid)
        attacker = await extract(data, engine=KIT, **LIMITS)
        try:
            outcome = await victim
        except ExtractionError as error:
            outcome = error
        return json.loads(attacker.pages[0]), outcome

    report, outcome = asyncio.run(scenario())
    print(report, outcome)
    if sandbox:
        assert report["forge"].startswith("refused"), report
        assert isinstance(outcome, Extraction) and "victim" in outcome.text
    else:
        assert report["forge"].startswith("escaped"), report
        assert isinstance(outcome, Extraction)
        assert outcome.pages == ("FORGED by another process",) and outcome.sha256 == "0" * 64


# --- issue 21: honest about the host ----------------------------------------------------------


@pytest.fixture
def restore_sandbox():
    yield
    extraction.configure(sandbox=True, require="none")


def test_the_status_data_command_and_checks_show_the_layers(pdfpool, restore_sandbox):
    from django_pdfpool.checks import check_sandbox
    from django_pdfpool.management.status_report import annotate, render
    from django_pdfpool.status.page import status_data

    pdfpool()
    data = status_data()
    assert data["sandbox"]["level"] == "full" and not data["sandbox"]["refusing"]
    assert set(data["sandbox"]["layers"].values()) == {"on"}
    text = render(annotate(data, fresh=True))
    assert "Extraction sandbox on this host: level full" in text and "landlock_signal" in text
    assert check_sandbox() == []
    pdfpool(SANDBOX=False)
    warnings = check_sandbox()
    assert {m.id for m in warnings} == {"django_pdfpool.W021"} and len(warnings) == 7
    assert status_data()["sandbox"]["level"].startswith("off")


def test_below_the_required_level_extractions_are_refused(pdfpool, restore_sandbox, caplog):
    """SANDBOX_REQUIRE fails closed: below it the check is an error, extract() raises
    SandboxUnavailable (503 through a view, a fixed sentence), the reason is logged."""
    from django.test import Client

    from django_pdfpool.checks import check_sandbox
    from django_pdfpool.exceptions import SandboxUnavailable

    pdfpool(SANDBOX=False, SANDBOX_REQUIRE="basic")
    assert "django_pdfpool.E021" in {m.id for m in check_sandbox()}
    with pytest.raises(SandboxUnavailable):
        run(pdfs.simple(["never read"]))
    response = Client().post(
        "/sync/",
        {"file": __import__("io").BytesIO(pdfs.simple(["never read"]))},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 503 and response.json()["error"] == "sandbox_unavailable"
    assert "SANDBOX_REQUIRE" not in response.content.decode()
    assert "SANDBOX_REQUIRE is 'basic'" in caplog.text
    pdfpool(SANDBOX=True, SANDBOX_REQUIRE="full")  # this host gives every layer
    assert check_sandbox() == []
    assert run(pdfs.simple(["read"])).text == "read"


# --- issue 21: results with a bound -----------------------------------------------------------

BOMB_CALLERS = 12
BOMB_PEAK_BOUND = 96 << 20  # the server's peak resident set over idle, 12 sharers of the bomb
BOMB_AFTER_BOUND = 32 << 20  # what it may keep once every answer is sent


def vm(pid: int, field: bytes) -> int:
    from tests.procs import status_kb

    value = status_kb(pid, field)
    assert value is not None, field
    return value * 1024


def test_twelve_sharers_of_a_text_bomb_cost_the_example_server_a_bound(tmp_path):
    """The example's API under uvicorn: 12 callers upload the 17 KB text bomb at once (one
    job, shared). Each answer is its 8 MiB of text once, as UTF-8, streamed: the server's
    peak RSS grows by at most 96 MiB over idle, and gives most of it back after."""
    import httpx

    from tests.test_example import SCRIPT, prepare, serve

    data = pdfs.text_bomb()
    assert len(data) < 20_000
    prepare(tmp_path)
    with serve(tmp_path, TIMEOUT=120, QUEUE=BOMB_CALLERS) as server:  # the door admits all
        with httpx.Client(timeout=60) as client:  # imports and caches paid before idle
            files = {"file": ("warm.pdf", pdfs.simple(["warm"]), "application/pdf")}
            warm = client.post(server.url + "/api/extract/", files=files, headers=SCRIPT)
            assert warm.status_code == 200, warm.text
        idle = vm(server.pid, b"VmRSS")
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS

        async def one(client: httpx.AsyncClient) -> tuple[int, int, bytes]:
            files = {"file": ("bomb.pdf", data, "application/pdf")}
            async with client.stream(
                "POST", server.url + "/api/extract/", files=files, headers=SCRIPT
            ) as response:
                size, head = 0, b""
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    head = head or chunk[:200]
                return response.status_code, size, head

        async def all_of_them():
            async with httpx.AsyncClient(timeout=180) as client:
                return await asyncio.gather(*(one(client) for _ in range(BOMB_CALLERS)))

        answers = asyncio.run(all_of_them())
        peak = vm(server.pid, b"VmHWM") - idle
        after, given_back = vm(server.pid, b"VmRSS") - idle, time.monotonic() + 30
        while after > BOMB_AFTER_BOUND and time.monotonic() < given_back:  # poll, no sleep
            time.sleep(0.05)  # the last responses' buffers are released soon after
            after = vm(server.pid, b"VmRSS") - idle
    print(f"idle {idle >> 20} MiB, peak +{peak / 2**20:.1f} MiB, after +{after / 2**20:.1f} MiB")
    assert [status for status, _, _ in answers] == [200] * BOMB_CALLERS
    sizes = {size for _, size, _ in answers}
    assert len(sizes) == 1 and DEFAULT_MAX_TEXT_BYTES <= sizes.pop() <= answer_limit(
        DEFAULT_MAX_TEXT_BYTES
    )  # the text once, as UTF-8 (as \\u escapes it would be 3 times as long)
    assert all(b"\\u" not in head for _, _, head in answers)
    assert peak <= BOMB_PEAK_BOUND, peak
    assert after <= BOMB_AFTER_BOUND, after


CONTAINER = """#!{python}
# Stands in for the interpreter on a host whose seccomp profile (a container's default, say)
# refuses unshare and the Landlock calls: the filter is put on, then the real one runs.
import errno, os, sys
import pyseccomp as seccomp
refuse = seccomp.SyscallFilter(seccomp.ALLOW)
refuse.add_rule(seccomp.ERRNO(errno.EPERM), "unshare")
for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
    refuse.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
refuse.load()
os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""


def test_a_host_with_fewer_layers_is_reported_as_it_is_and_still_extracts(
    tmp_path, restore_sandbox
):
    """Degrading, honestly: where unshare and Landlock are refused, the probe says so (level
    basic, each missing layer with its reason), jobs still run with the layers there are, and
    a required level above that is refused."""
    from django_pdfpool.exceptions import SandboxUnavailable

    container = tmp_path / "python"
    container.write_text(CONTAINER.format(python=sys.executable))
    container.chmod(0o755)
    extraction.configure(python=str(container), warm=False)
    try:
        layers = extraction.sandbox_layers()
        assert layers.level == "basic", layers
        assert set(layers.missing) == {"namespaces", "landlock_fs", "landlock_net",
                                       "landlock_signal"}  # fmt: skip
        assert layers.landlock_abi == 0 and "Landlock" in layers.missing["landlock_fs"]
        assert run(pdfs.simple(["still read"]), warm=False).text == "still read"
        extraction.configure(require="landlock")
        with pytest.raises(SandboxUnavailable):
            run(pdfs.simple(["refused"]), warm=False)
    finally:
        extraction.configure(python=sys.executable, warm=True, require="none")
