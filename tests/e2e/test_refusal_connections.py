"""Database connections opened for a request under a real ASGI server (a project's
``REFUSAL_VIEW`` or ``CALLER``, the door reading a session) are closed at the end of the
request, as Django closes a view's (``CONN_MAX_AGE`` 0), whichever entry answered."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import httpx
import pytest

from tests.support import pdfs
from tests.support.servers import ROOT, uvicorn, wait_for

MiB = 1024 * 1024
SETTINGS = "tests.project.db_settings"


def opened(pid: int, path: str) -> int:
    """How many file descriptors of ``pid`` hold ``path`` open."""
    found = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            found += os.readlink(f"/proc/{pid}/fd/{fd}") == path
    return found


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("db") / "db.sqlite3")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "PDFPOOL_TEST_DB": path}
    migrate = [sys.executable, "-m", "django", "migrate", "-v0"]
    subprocess.run(migrate, env=env, cwd=ROOT, check=True, timeout=120)
    return path


@pytest.mark.parametrize(
    ("url", "headers", "content", "answer"),
    [
        ("/sync/", {}, b"x" * (2 * MiB), (499, "too_large")),  # the door, from the headers
        ("/async/", {}, b"x=1", (499, "no_upload")),  # an async view's decorator
        ("/drf/apiview/session/", {"cookie": "sessionid=" + "s" * 32}, b"x" * (2 * MiB), None),
        ("/async/", {"content-type": "application/pdf"}, pdfs.simple(["x"]), (200, "")),
    ],
    ids=["refusal-view-door", "refusal-view-async-decorator", "door-reads-a-session", "caller"],
)
def test_a_requests_database_connections_are_closed_with_it(
    database, url, headers, content, answer
):
    env = {"DJANGO_SETTINGS_MODULE": SETTINGS, "PDFPOOL_TEST_DB": database}
    pdfpool = {"MAX_UPLOAD_SIZE": MiB, "REFUSAL_VIEW": "tests.project.views.db_refusal"}
    pdfpool["CALLER"] = "tests.project.views.db_caller"  # asked at the door and in the view
    app = "tests.project.contrib_asgi:application"
    with uvicorn(app, pdfpool=pdfpool, env=env) as server:
        headers = {"content-type": "application/x-www-form-urlencoded", **headers}
        response = httpx.post(f"{server.url}{url}", content=content, headers=headers, timeout=30)
        if answer is not None:
            status, code = answer
            assert response.status_code == status, response.text
            assert response.text.startswith(f"{code}: " if code else "")
        wait_for(lambda: opened(server.pid, database) == 0, 5.0)
