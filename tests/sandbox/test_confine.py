"""The children's confinement: the escape kit gets nowhere unless the sandbox is off, the
layers are reported (status, command, checks), another job's child cannot forge an answer,
below the required level extractions are refused, a host with fewer layers still extracts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from django_pdfpool import Extraction, extract
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox import extract as sandbox
from tests.conftest import wait_until
from tests.support import pdfs
from tests.support.escape_kit import ENGINE as KIT
from tests.support.escape_kit import document as kit_document
from tests.support.sandbox import LIMITS, run


def require_full_sandbox() -> None:
    """Skip where this host does not give every layer (a container's default seccomp profile
    refuses namespaces, say); under CI=true fail instead: CI's kernel has them all."""
    from tests.support.ci_strict import in_ci

    layers = sandbox.sandbox_layers()
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
    sandbox.register_engine(KIT)
    sandbox.configure(warm=False)  # the template and spares of the old PYTHONPATH go
    sandbox.configure(warm=True)  # a test before may have left the template off
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
    sandbox.configure(sandbox=True, warm=False)
    sandbox.configure(warm=True)


def run_kit(targets: dict, warm: bool, **extra) -> dict[str, str]:
    aims = {k: v for k, v in targets.items() if k not in ("listener", "victim_proc")}
    data = kit_document(**aims, **extra)
    for _ in range(50):  # a forked child once the template has the kit preloaded
        result = run(data, engine=KIT, warm=warm)
        if result.child_start == ("forked" if warm else "cold"):
            return json.loads(result.pages[0])
        wait_until(lambda: bool(sandbox.idle_pids()), timeout=30)
    raise AssertionError("no forked child took the kit")


def connections(listener) -> int:
    count = 0
    while True:
        try:
            listener.accept()[0].close()
            count += 1
        except BlockingIOError:
            return count


def inspect_a_busy_child() -> dict[str, str]:
    from tests.support.procs import child_pids, rlimits

    async def scenario() -> dict[str, str]:
        mine = child_pids() - set(sandbox.idle_pids())
        task = asyncio.ensure_future(extract(pdfs.slow_pdf("busy", 3), **LIMITS))
        while True:
            for pid in child_pids() - mine - set(sandbox.idle_pids()):
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


@pytest.fixture
def restore_sandbox():
    yield
    sandbox.configure(sandbox=True, require="none")


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


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "sandbox-off"])
def test_the_escape_kit_gets_nowhere_unless_the_sandbox_is_off(targets, warm, sandboxed):
    """Signal another process and the server, read their environ, open another process's fd
    for writing, change another process's limits, priority, scheduling, CPUs, I/O priority
    or memory placement (the victim's, the server's), ptrace the parent, connect to loopback,
    create a file, run a program (and execve itself), read a file not given or one in a
    project on PYTHONPATH: every attempt refused in a sandboxed child; with the sandbox off
    (no layers at all) the same kit gets out, so the test can fail."""
    from tests.support.escape_kit import VICTIM_NOFILE
    from tests.support.procs import rlimits

    if sandboxed:
        require_full_sandbox()
    sandbox.configure(sandbox=sandboxed)
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
    if sandboxed:
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
    layers = sandbox.sandbox_layers()
    assert layers.enabled and layers.level == "full", layers
    assert layers.landlock_abi >= 6 and not layers.missing
    sandbox.configure(warm=False)
    try:
        seen = inspect_a_busy_child()
    finally:
        sandbox.configure(warm=True)
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2", seen
    assert int(seen["Seccomp_filters"]) >= 2  # the start-up filter and the job's
    for kind in ("user", "net", "ipc"):  # namespaces of its own, not the server's
        assert seen[f"ns/{kind}"] != os.readlink(f"/proc/self/ns/{kind}"), kind


def _alive(pid: int) -> bool:
    """Whether the process is there and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "sandbox-off"])
def test_another_jobs_child_cannot_forge_this_jobs_answer(
    targets, sandboxed, tmp_path, restore_sandbox
):
    """A forged answer, end to end: while a victim's job runs, a hostile document in
    another job's child writes a forged answer into /proc/<victim's child>/fd/1. Sandboxed:
    refused, the victim gets its own text. Off: the victim gets the forged pages."""
    from tests.support.procs import child_pids, rlimits

    if sandboxed:
        require_full_sandbox()
    sandbox.configure(sandbox=sandboxed)

    async def scenario():
        mine = child_pids() - set(sandbox.idle_pids())
        # about 1 s of work: running while the attacker's job runs (checked below), and done
        # well within its timeout at the children's lower priority beside other work on the CPUs
        victim = asyncio.ensure_future(extract(pdfs.slow_pdf("victim", 1), **LIMITS))
        pid = None
        while pid is None:
            assert not victim.done()
            for candidate in child_pids() - mine - set(sandbox.idle_pids()):
                if rlimits(candidate).get("Max address space") == str(LIMITS["memory_limit"]):
                    pid = candidate
            await asyncio.sleep(0.01)
        data = kit_document(forge=pid)
        attacker = await extract(data, engine=KIT, **LIMITS)
        if sandboxed:  # refused by the sandbox, not for want of a victim: it was still at work
            assert _alive(pid), "the victim's child ended before the attacker's job"
        try:
            outcome = await victim
        except ExtractionError as error:
            outcome = error
        return json.loads(attacker.pages[0]), outcome

    report, outcome = asyncio.run(scenario())
    print(report, outcome)
    if sandboxed:
        assert report["forge"].startswith("refused"), report
        assert isinstance(outcome, Extraction) and "victim" in outcome.text
    else:
        assert report["forge"].startswith("escaped"), report
        assert isinstance(outcome, Extraction)
        assert outcome.pages == ("FORGED by another process",) and outcome.sha256 == "0" * 64


def test_the_status_data_command_and_checks_show_the_layers(pdfpool, restore_sandbox):
    from django_pdfpool.checks import check_sandbox
    from django_pdfpool.management.commands.pdfpool import annotate, status_text
    from django_pdfpool.status.page import status_data

    pdfpool()
    data = status_data()
    assert data["sandbox"]["level"] == "full" and not data["sandbox"]["refusing"]
    assert set(data["sandbox"]["layers"].values()) == {"on"}
    text = status_text(annotate(data, fresh=True))
    assert "Extraction sandbox on this host: level full" in text and "landlock_signal" in text
    assert check_sandbox() == []
    pdfpool(SANDBOX={"LAYERS": False})
    warnings = check_sandbox()
    assert [m.id for m in warnings] == ["django_pdfpool.W021"]  # one, naming the setting
    assert "PDFPOOL['SANDBOX']['LAYERS'] is False" in warnings[0].msg
    assert status_data()["sandbox"]["level"].startswith("off")


def test_below_the_required_level_extractions_are_refused(pdfpool, restore_sandbox, caplog):
    """SANDBOX["REQUIRE"] fails closed: below it the check is an error, extract() raises
    SandboxUnavailable (503 through a view, a fixed sentence), the reason is logged."""
    from django.test import Client

    from django_pdfpool.checks import check_sandbox
    from django_pdfpool.exceptions import SandboxUnavailable

    pdfpool(SANDBOX={"LAYERS": False, "REQUIRE": "basic"})
    assert "django_pdfpool.E021" in {m.id for m in check_sandbox()}
    with pytest.raises(SandboxUnavailable):
        run(pdfs.simple(["never read"]))
    response = Client().post(
        "/sync/",
        {"file": __import__("io").BytesIO(pdfs.simple(["never read"]))},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 503 and response.json()["error"] == "sandbox_unavailable"
    assert "REQUIRE" not in response.content.decode()
    assert "PDFPOOL['SANDBOX']['REQUIRE'] is 'basic'" in caplog.text
    pdfpool(SANDBOX={"REQUIRE": "full"})  # this host gives every layer
    assert check_sandbox() == []
    assert run(pdfs.simple(["read"])).text == "read"


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
    sandbox.configure(python=str(container), warm=False)
    try:
        layers = sandbox.sandbox_layers()
        assert layers.level == "basic", layers
        assert set(layers.missing) == {"namespaces", "landlock_fs", "landlock_net",
                                       "landlock_signal"}  # fmt: skip
        assert layers.landlock_abi == 0 and "Landlock" in layers.missing["landlock_fs"]
        assert run(pdfs.simple(["still read"]), warm=False).text == "still read"
        sandbox.configure(require="landlock")
        with pytest.raises(SandboxUnavailable):
            run(pdfs.simple(["refused"]), warm=False)
    finally:
        sandbox.configure(python=sys.executable, warm=True, require="none")


def _placement(pid: int) -> tuple[int, int, int]:
    """(session, process group, nice) of a live process, read while it runs."""
    return os.getsid(pid), os.getpgid(pid), os.getpriority(os.PRIO_PROCESS, pid)


@pytest.mark.parametrize("nice", [None, 3], ids=["default", "configured"])
@pytest.mark.parametrize("warm", [True, False], ids=["forked", "cold"])
def test_a_childs_cpu_priority_is_lower_and_counts_against_the_server(warm, nice):
    """Each job's child runs at the server's nice plus the configured one (``DEFAULT_NICE``
    unless configured; 3 is higher a priority, so it is not starved on a busy host) in the
    server's session, in a process group of its own (killed whole): under the kernel's
    autogroup a child in a session of its own would compete with the whole server as an
    equal, whatever its nice."""
    import psutil

    from django_pdfpool.sandbox.wire import DEFAULT_NICE
    from tests.support.procs import child_pids, rlimits

    memory_limit = LIMITS["memory_limit"]
    sandbox.configure(warm=warm, nice=nice)
    try:
        if warm:  # the template starts with the first job, and is ready after it
            asyncio.run(extract(pdfs.simple(["warm"]), **LIMITS))
            wait_until(lambda: bool(sandbox.idle_pids()), timeout=30)

        async def scenario() -> tuple[int, tuple[int, int, int], int, int | None]:
            mine = child_pids() - set(sandbox.idle_pids())
            task = asyncio.ensure_future(extract(pdfs.slow_pdf("busy", 1), **LIMITS))
            seen = None
            while seen is None:
                for pid in child_pids() - mine - set(sandbox.idle_pids()):
                    with contextlib.suppress(OSError):  # the job's limits: it has the job
                        if rlimits(pid).get("Max address space") == str(memory_limit):
                            seen = pid, _placement(pid), psutil.Process(pid).ppid()
                assert seen or not task.done(), "the job ended before its child was seen"
                await asyncio.sleep(0.01)
            template = sandbox._template.pid()
            task.cancel()  # seen while it ran: its end is not the point
            with pytest.raises(asyncio.CancelledError):
                await task
            return (*seen, template)

        pid, (session, group, seen_nice), parent, template = asyncio.run(scenario())
    finally:
        sandbox.configure(warm=True, nice=DEFAULT_NICE)
    # forked by the template, or started by this process: how it started (child_start)
    assert parent == (template if warm else os.getpid()) and parent is not None
    assert session == os.getsid(0)
    assert group == pid
    expected = min(
        19, os.getpriority(os.PRIO_PROCESS, 0) + (DEFAULT_NICE if nice is None else nice)
    )
    assert seen_nice == expected
    assert seen_nice > os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.parametrize("nice", [-1, 20, 5.0, True, "5"])
def test_a_nice_value_outside_0_to_19_is_refused_and_changes_nothing(nice):

    before = sandbox._template.nice, sandbox._template.enabled
    with pytest.raises(ValueError, match="nice must be an integer from 0 to 19"):
        sandbox.configure(nice=nice, warm=not before[1])
    assert (sandbox._template.nice, sandbox._template.enabled) == before


def test_a_child_lowers_its_priority_from_its_parents_never_raises_it():
    """``--nice N`` adds N to the nice the child inherits: a server run at nice 8 gets its
    children at 13, not at 5 (which an unprivileged process may not set: EACCES)."""
    from django_pdfpool.sandbox.children import CHILD_MODULE
    from django_pdfpool.sandbox.wire import READY

    child = subprocess.Popen(
        [sys.executable, "-P", "-m", CHILD_MODULE, "--nice", "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.nice(8),
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == READY
        nice = os.getpriority(os.PRIO_PROCESS, child.pid)  # it waits for its job line
    finally:
        child.kill()
        child.wait(timeout=30)
    assert nice == 8 + 5


TIOCSTI_PROBE = """
import fcntl, os, sys, termios, tty
from django_pdfpool.sandbox import confine
master, terminal = os.openpty()
os.setsid()
fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)  # this session's controlling terminal, as a
tty.setraw(terminal)                          # server started from a shell has one
if sys.argv[1] == "seccomp":
    confine._import_bindings()
    confine._seccomp_process()
elif sys.argv[1] == "sandbox":
    confine.confine_process()
fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
try:
    fcntl.ioctl(fd, termios.TIOCSTI, b"x")
except OSError as exc:
    print("refused", exc.errno)
    raise SystemExit(0)
os.set_blocking(terminal, False)
print("typed", os.read(terminal, 10).decode())
"""


@pytest.mark.parametrize("layers", ["off", "seccomp", "sandbox"])
def test_a_child_cannot_type_into_the_servers_terminal(layers):
    """A child shares the server's session, and so its controlling terminal: TIOCSTI (and
    TIOCLINUX) would push keystrokes into the shell that started the server. Refused by
    the start-up seccomp filter and so by the sandbox; with neither, typed."""
    from django_pdfpool.sandbox import confine

    if Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "0":
        pytest.skip("this kernel refuses TIOCSTI to everyone (dev.tty.legacy_tiocsti = 0)")
    if layers != "off":
        require_full_sandbox()
    import termios

    assert confine.TIOCSTI == termios.TIOCSTI
    out = subprocess.run(
        [sys.executable, "-c", TIOCSTI_PROBE, layers],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert out == ("typed x" if layers == "off" else "refused 1"), out


BENEATH_PROBE = """
import os, sys
from django_pdfpool.sandbox import confine
stage = sys.argv[1]
confine.LIBRARY_DIRS = (*confine.LIBRARY_DIRS, stage)  # the staging directory: a read root
if sys.argv[2] == "sandbox":
    confine.confine_process()
    confine.prepare_job()
    confine.confine_job(os.path.join(stage, "job.pdf"))
for name in ("job.pdf", "neighbour.pdf"):
    try:
        with open(os.path.join(stage, name), "rb") as file:
            print(name, "read", file.read().decode())
    except OSError as exc:
        print(name, "refused", exc.errno)
"""


@pytest.mark.parametrize("layers", ["off", "sandbox"])
def test_a_job_file_beneath_a_read_root_leaves_its_neighbours_unreadable(layers, tmp_path):
    """Staged beneath a directory every job may read (a prefix, say), the job's file is read
    and another caller's staged PDF beside it is not; with no sandbox both are."""
    if layers != "off":
        require_full_sandbox()
    (tmp_path / "job.pdf").write_text("mine")
    (tmp_path / "neighbour.pdf").write_text("theirs")
    out = subprocess.run(
        [sys.executable, "-c", BENEATH_PROBE, str(tmp_path), layers],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    refused = "neighbour.pdf read theirs" if layers == "off" else "neighbour.pdf refused 13"
    assert out == ["job.pdf read mine", refused], out


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "sandbox-off"])
def test_a_child_holds_no_memory_outside_its_address_space(sandboxed, restore_sandbox):
    """Code run by a document writes 3 times its memory limit into a memfd, fills System V
    segments it leaves behind (they outlive it, in the template's IPC namespace or the host's)
    and fills pipes (as many as its open-files limit allows: a million in many containers):
    none counts against RLIMIT_AS. Sandboxed, each is refused; off, each gets through."""
    import ctypes

    from tests.sandbox.hostile_engines import HOARD, IPC_RMID

    if sandboxed:
        require_full_sandbox()
    sandbox.register_engine(HOARD)
    sandbox.configure(sandbox=sandboxed)
    limit = 128
    result = run(f"%PDF-hoard {3 * limit}".encode(), engine=HOARD, memory_limit=limit << 20)
    report = json.loads(result.pages[0])
    if not sandboxed:  # in this host's IPC namespace (no namespaces either): removed here
        for segment in json.loads(report["shm"].partition("segments ")[2] or "[]"):
            ctypes.CDLL(None).shmctl(segment, IPC_RMID, None)
    print(report)
    if sandboxed:
        assert report == dict.fromkeys(("memfd", "shm", "pipes"), "refused: EPERM")
    else:
        assert report["memfd"] == f"escaped: {3 * limit} MiB"
        assert report["shm"].startswith("escaped: segments")
        assert int(report["pipes"].split()[1]) >= 16, report  # 1 MiB a pipe, up to 64 MiB


def test_a_stop_signal_to_every_process_spares_the_probe_child():
    """systemd's stop signals every process of the service: the probe child, started with the
    stop signals blocked as a job's, still says what the host gives (its finding is kept)."""
    import signal
    import threading

    from tests.support.procs import child_pids

    found: list[sandbox.SandboxLayers] = []
    key = (sandbox._template.python, sandbox._template.env, sandbox._template.sandbox)
    before = child_pids()
    prober = threading.Thread(target=lambda: found.append(sandbox.probe(*key)))
    prober.start()

    def probe_child() -> int | None:
        for pid in child_pids() - before:
            with contextlib.suppress(OSError):
                if b"--probe" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                    return pid
        return None

    wait_until(lambda: probe_child() is not None or not prober.is_alive(), timeout=30)
    pid = probe_child()
    assert pid is not None, "the probe ended before it was seen"
    for stop in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, stop)
    prober.join(60)
    assert found and "the probe child failed" not in found[0].missing.values(), found


def test_a_probe_whose_child_failed_is_tried_again_later_and_its_refusal_logged_once(
    restore_sandbox, monkeypatch, caplog
):
    """Under REQUIRE, a probe child killed before it said anything (a fault of the moment, not a
    finding) refuses jobs only until the probe is tried again, PROBE_RETRY s later, not for the
    life of the process; meanwhile no probe runs per request, and the refusal is logged once."""
    import signal
    import threading
    import time

    from django_pdfpool.exceptions import SandboxUnavailable
    from tests.support.procs import child_pids

    monkeypatch.setattr(sandbox, "PROBE_RETRY", 1.0)
    sandbox.configure(require="basic")
    key = (sandbox._template.python, sandbox._template.env, sandbox._template.sandbox)
    sandbox._found.pop(key, None)  # this configuration not probed yet in this process

    def kill_a_probe() -> None:
        """Ask for the layers until that starts a probe child; SIGKILL it before it answers."""
        deadline = time.monotonic() + 30
        killed: list[int] = []
        while not killed:
            assert time.monotonic() < deadline, "no probe child was started"
            before = child_pids()
            probing = threading.Thread(target=sandbox.sandbox_layers)
            probing.start()

            def probe_killed(before=before, probing=probing) -> bool:
                for pid in child_pids() - before:
                    with contextlib.suppress(OSError):
                        if b"--probe" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                            os.kill(pid, signal.SIGKILL)
                            killed.append(pid)
                return bool(killed) or not probing.is_alive()

            wait_until(probe_killed, timeout=30)
            probing.join(60)
            time.sleep(0.01)  # a poll's pace, while the retry is not due

    kill_a_probe()
    kept = sandbox._found[key]
    for _ in range(3):  # at once, and no probe per request: the failed one is kept a while
        with pytest.raises(SandboxUnavailable):
            run(pdfs.simple(["refused"]))
    assert sandbox._found[key] is kept
    kill_a_probe()  # tried again once due, and failed again: the same finding
    with pytest.raises(SandboxUnavailable):
        run(pdfs.simple(["refused"]))
    assert caplog.text.count("Extractions refused") == 1, caplog.text
    deadline = time.monotonic() + 30
    while True:  # the probe tried again, once its retry is due, and it finds the layers
        try:
            assert run(pdfs.simple(["read"])).text == "read"
            break
        except SandboxUnavailable:
            assert time.monotonic() < deadline, "the failed probe was never tried again"
            time.sleep(0.05)


def test_a_probe_tried_again_holds_no_caller_while_its_child_hangs(restore_sandbox, monkeypatch):
    """The probe tried again after a failed one is stopped (SIGSTOP): meanwhile extractions
    are refused at once on the failed finding kept, not held for up to PROBE_TIMEOUT each."""
    import signal
    import threading
    import time

    from django_pdfpool.exceptions import SandboxUnavailable
    from tests.support.procs import child_pids

    monkeypatch.setattr(sandbox, "PROBE_RETRY", 0.5)
    sandbox.configure(require="basic")
    key = (sandbox._template.python, sandbox._template.env, sandbox._template.sandbox)
    failed = sandbox.SandboxLayers(
        (), dict.fromkeys(sandbox.LAYERS, sandbox.PROBE_FAILED), 0, "none"
    )
    sandbox._found[key] = failed, time.monotonic()  # a failed probe, due to be tried again
    before = child_pids()
    probing = threading.Thread(target=sandbox.sandbox_layers)
    probing.start()
    stopped: list[int] = []

    def probe_stopped() -> bool:
        for pid in child_pids() - before:
            with contextlib.suppress(OSError):
                if b"--probe" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
        return bool(stopped) or not probing.is_alive()

    try:
        wait_until(probe_stopped, timeout=30)
        assert stopped, "the probe ended before it was seen"
        start = time.monotonic()
        with pytest.raises(SandboxUnavailable):
            run(pdfs.simple(["refused"]))
        assert time.monotonic() - start < 2.0
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGKILL)
        probing.join(60)
