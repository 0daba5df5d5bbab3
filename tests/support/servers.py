"""Real servers (uvicorn, gunicorn sync and gthread, hypercorn, granian, runserver) in a
child process, on a free loopback port, for end-to-end tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")
_GUNICORN_LISTENING = re.compile(rb"Listening at: http://127\.0\.0\.1:(\d+)")


class Server:
    """A running uvicorn; ``url`` is its base address, ``process`` its Popen."""

    def __init__(
        self, process: subprocess.Popen, port: int, log: list[bytes], reader: threading.Thread
    ) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._reader = reader  # appends to log until the server's pipe ends

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        """Everything the server logged so far; all of it once it has exited (the reader
        thread may still be draining the pipe's last lines when ``wait()`` returns)."""
        if self.process.poll() is not None:
            self._reader.join(10)
        return b"".join(self.log).decode(errors="replace")


@contextmanager
def uvicorn(
    app: str = "tests.project.asgi:application",
    *,
    pdfpool: dict | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 30.0,
    staged: Path | None = None,
    warm: bool = False,
) -> Iterator[Server]:
    """Serve ``app`` with uvicorn on 127.0.0.1 and a free port; stop it (SIGTERM) afterwards."""
    command = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", "0"]
    command += ["--lifespan", "on", "--no-access-log"]
    env = {**project_env(staged, warm), **(env or {})}
    with _serve(command, _LISTENING, pdfpool, env, cwd, timeout) as server:
        yield server


@contextmanager
def gunicorn(
    app: str = "tests.project.wsgi:application",
    *,
    pdfpool: dict | None = None,
    timeout: float = 30.0,
    staged: Path | None = None,
) -> Iterator[Server]:
    """Serve the WSGI ``app`` with gunicorn (one worker, four threads) on a free port."""
    command = [sys.executable, "-m", "gunicorn", app, "-b", "127.0.0.1:0", "-k", "gthread"]
    command += ["--threads", "4", "--workers", "1"]
    env = {"DJANGO_SETTINGS_MODULE": "tests.project.settings", **project_env(staged)}
    with _serve(command, _GUNICORN_LISTENING, pdfpool, env, ROOT, timeout) as server:
        yield server


DOOR_ASGI = "tests.project.door_asgi:application"
SERVED = ("uvicorn", "hypercorn", "granian", "gunicorn-sync", "gunicorn-gthread", "runserver")
"""Every server the door's answers are tested under: ASGI ones serve ``PdfPoolDoor``,
WSGI ones the test project, where ``AdmissionMiddleware`` is the door."""


def project_env(staged: Path | None, warm: bool = False) -> dict[str, str]:
    """The test project's settings that are not PDFPOOL's (tests/project/settings.py): where
    uploads are staged (FILE_UPLOAD_TEMP_DIR), and children forked warm or started cold."""
    return {"PDFPOOL_TEST_STAGED": str(staged or ""), "PDFPOOL_TEST_WARM": "1" if warm else ""}


def free_port() -> int:
    """A loopback port nobody listens on now (for servers that log no port of their own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve(
    name: str,
    *,
    pdfpool: dict | None = None,
    timeout: float = 30.0,
    staged: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """One of ``SERVED`` (or daphne) on a free port, serving the door, until the block ends
    (SIGTERM); ``env``: more of its environment (``SCRIPT_NAME`` for gunicorn, say)."""
    env = {"DJANGO_SETTINGS_MODULE": "tests.project.settings", **project_env(staged), **(env or {})}
    if name in ("uvicorn", "granian"):
        run = uvicorn if name == "uvicorn" else granian
        with run(DOOR_ASGI, pdfpool=pdfpool, env=env, timeout=timeout) as server:
            yield server
        return
    port = free_port()
    bind = f"127.0.0.1:{port}"
    commands = {
        "hypercorn": f"hypercorn {DOOR_ASGI} --bind {bind}",
        "daphne": f"daphne -b 127.0.0.1 -p {port} {DOOR_ASGI}",
        "gunicorn-sync": f"gunicorn tests.project.wsgi:application -b {bind} -k sync --workers 2",
        "gunicorn-gthread": f"gunicorn tests.project.wsgi:application -b {bind} -k gthread "
        "--threads 4 --workers 1",
        "runserver": f"django runserver {bind} --noreload",
    }
    command = [sys.executable, "-m", *commands[name].split()]
    with _serve(command, _NEVER, pdfpool, env, ROOT, 0, wait=False) as server:
        server.url = f"http://127.0.0.1:{port}"
        _until_listening(port, server, timeout)
        yield server


@contextmanager
def granian(
    app: str = DOOR_ASGI,
    *,
    pdfpool: dict | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 30.0,
    staged: Path | None = None,
) -> Iterator[Server]:
    """Serve the ASGI ``app`` with granian (one worker) on a free port, once its worker has
    started; stop it (SIGTERM) afterwards. Its log (stdout and stderr) is ``server.log``."""
    env = {**project_env(staged), **(env or {})}
    for _attempt in range(3):  # a port found free may be taken before granian binds it
        port = free_port()
        command = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--workers", "1", app]
        with _serve(command, _NEVER, pdfpool, env, cwd, timeout, wait=False, merged=True) as server:
            server.url = f"http://127.0.0.1:{port}"
            if _listening(port, server, timeout) and _logged(server, b"Started worker", timeout):
                yield server
                return
    raise RuntimeError(f"granian did not start:\n{server.text()}")


_NEVER = re.compile(rb"(?!)")  # never matches: readiness is a connection that succeeds


def _listening(port: int, server: Server, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def _logged(server: Server, line: bytes, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.process.poll() is None:
        if any(line in logged for logged in list(server.log)):
            return True
        time.sleep(0.02)
    return False


def _until_listening(port: int, server: Server, timeout: float) -> None:
    if not _listening(port, server, timeout):
        raise RuntimeError(f"the server on port {port} did not start:\n{server.text()}")


@contextmanager
def _serve(
    command: list[str],
    listening: re.Pattern[bytes],
    pdfpool: dict | None,
    env: dict[str, str] | None,
    cwd: Path,
    timeout: float,
    *,
    wait: bool = True,
    merged: bool = False,
) -> Iterator[Server]:
    """Run ``command`` until its log says it listens (``listening`` gives the port); with
    ``wait`` False, at once (the caller knows the port). ``merged``: its stdout is logged
    too (granian logs there)."""
    environment = {**os.environ, **(env or {})}
    if pdfpool is not None:
        environment["PDFPOOL_JSON"] = json.dumps(pdfpool)
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE if merged else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        start_new_session=True,  # its workers too are ended with it (end_group)
    )
    log: list[bytes] = []
    found = threading.Event()
    port: list[int] = []

    def drain() -> None:  # keep reading: a full pipe would block the server
        for line in process.stdout if merged else process.stderr:
            log.append(line)
            match = listening.search(line)
            if match and not found.is_set():
                port.append(int(match.group(1)))
                found.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if wait and not found.wait(timeout):
            raise RuntimeError(
                f"{command[2]} did not start:\n" + b"".join(log).decode(errors="replace")
            )
        yield Server(process, port[0] if port else 0, log, reader)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout or 30.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        end_group(process)
        reader.join(5)


def end_group(process: subprocess.Popen) -> None:
    """SIGKILL whatever is left of a server started in a session of its own (a worker
    that outlived a killed master, say): nothing of a test's server outlives the test."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def wait_for(condition, timeout: float = 10.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def read_all_sent(pid: int, port: int, address: str) -> bool:
    """The server listening on ``port`` has read every byte that the connection from
    ``address`` sent it: the receive queue of the server's end is empty (/proc/PID/net/tcp
    lists the TCP sockets of ``pid``'s network namespace; an accepted connection is there
    with its queue even before the server reads it)."""
    local = f"{socket.inet_aton('127.0.0.1')[::-1].hex().upper()}:{port:04X}"
    remote = socket.inet_aton(address)[::-1].hex().upper() + ":"
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[2].startswith(remote) and fields[3] == "01":
                return int(fields[4].split(":")[1], 16) == 0
    return False  # not (yet) an established connection of the server's
