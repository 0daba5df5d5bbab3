"""The quickstart's `runserver` and docs/deployment.md's servers as a newcomer runs them: in
a project made by `startproject` with the quickstart's files and deployment.md's `asgi.py`,
each command line starts a server, with no DJANGO_SETTINGS_MODULE in the environment, that
answers the quickstart's `curl` line (run with the real curl) and stops at SIGTERM. The only
change made to a line is its address, and the file the curl line names."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import pdfs
from tests.test_docs import fences_of

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
SERVERS = ("uvicorn", "gunicorn", "hypercorn", "granian")


def shell_lines(page: str) -> list[str]:
    """``page``'s shell lines, comments cut."""
    return [
        line.split("#")[0].strip()
        for block in fences_of(DOCS / page).blocks
        if block.language == "sh"
        for line in block.body.splitlines()
        if line.strip()
    ]


def command_lines() -> list[str]:
    """The quickstart's runserver line, then deployment.md's lines that start a server."""
    (runserver,) = [line for line in shell_lines("quickstart.md") if "runserver" in line]
    served = [line for line in shell_lines("deployment.md") if line.split()[0] in SERVERS]
    return [runserver, *served]


def curl_line() -> str:
    (line,) = [line for line in shell_lines("quickstart.md") if line.startswith("curl ")]
    return line


def asgi_block() -> str:
    (body,) = [
        b.body for b in fences_of(DOCS / "deployment.md").blocks if "PoolLifespan(" in b.body
    ]
    return body


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def addressed(line: str, port: int) -> list[str]:
    """``line``'s words, served on 127.0.0.1:``port`` instead of the address it names."""
    line = line.replace("0.0.0.0", "127.0.0.1").replace("8000", str(port))
    words = shlex.split(line)
    if str(port) not in line:  # the server's default address
        words += {
            "uvicorn": ["--port", str(port)],
            "gunicorn": ["-b", f"127.0.0.1:{port}"],
            "python": [f"127.0.0.1:{port}"],  # manage.py runserver
        }[words[0]]
    return words


def curl(line: str, port: int, document: Path) -> tuple[int, dict[str, object]]:
    """The quickstart's curl ``line`` against 127.0.0.1:``port``, sending ``document``."""
    line = line.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    words = [re.sub(r"^file=@\S+$", f"file=@{document}", word) for word in shlex.split(line)]
    done = subprocess.run(
        [*words, "--silent", "--write-out", "\n%{http_code}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    body, status = done.stdout.rsplit("\n", 1)
    return int(status), json.loads(body)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`django-admin startproject mysite .`, the quickstart's titled blocks, then
    deployment.md's asgi.py in place of the one startproject wrote."""
    where = tmp_path_factory.mktemp("deployed")
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(where)],
        check=True,
        capture_output=True,
        env=environment(),
    )
    for block in fences_of(DOCS / "quickstart.md").blocks:
        if block.title:
            name, _, how = block.title.partition(" ")
            target = where / name
            before = target.read_text() + "\n" if how == "(at the end)" else ""
            target.write_text(before + block.body + "\n")
    (where / "mysite" / "asgi.py").write_text(asgi_block() + "\n")
    return where


def environment() -> dict[str, str]:
    """This environment without the suite's settings, the package importable from the tree."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "DJANGO_SETTINGS_MODULE" and not key.startswith("PDFPOOL")
    }
    return {**env, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{env['PATH']}"}


def test_the_pages_name_runserver_and_each_server():
    assert {shlex.split(line)[0] for line in command_lines()} == {"python", *SERVERS}


@pytest.mark.parametrize("line", command_lines(), ids=lambda line: " ".join(line.split()[:3]))
def test_each_server_line_serves_the_curl_line(project: Path, tmp_path: Path, line: str) -> None:
    if "uvicorn_worker." in line and importlib.util.find_spec("uvicorn_worker") is None:
        pytest.skip("needs the uvicorn-worker package")
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    port = free_port()
    words = addressed(line, port)
    program = sys.executable if words[0] == "python" else str(BIN / words[0])
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [program, *words[1:]],
            cwd=project,
            env=environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}/api/extract/"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"{words[0]} exited:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{words[0]} never answered:\n{log.read_text()}"
            time.sleep(0.2)
        document = tmp_path / "some.pdf"
        document.write_bytes(pdfs.simple(["served as the page says"]))
        status, answer = curl(curl_line(), port, document)
        assert (status, answer) == (200, {"pages": 1, "text": "served as the page says"})
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        assert not re.search(r"Traceback", log.read_text()), log.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):  # runserver's reloaded child, if left
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
