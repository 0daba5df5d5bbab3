"""A project's ``REFUSAL_VIEW`` that reads the database, under a real ASGI server: its
connection is closed at the end of the request, as Django closes a view's
(``CONN_MAX_AGE`` 0), whichever entry answered."""

from __future__ import annotations

import contextlib
import os
import sqlite3

import httpx
import pytest

from tests.support.servers import DOOR_ASGI, uvicorn, wait_for

MiB = 1024 * 1024


def opened(pid: int, path: str) -> int:
    """How many file descriptors of ``pid`` hold ``path`` open."""
    found = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            found += os.readlink(f"/proc/{pid}/fd/{fd}") == path
    return found


@pytest.mark.parametrize(
    ("url", "content", "code"),
    [
        ("/sync/", b"x" * (2 * MiB), "too_large"),  # the door, from the headers
        ("/async/", b"x=1", "no_upload"),  # an async view's decorator
    ],
    ids=["door", "async-decorator"],
)
def test_a_refusal_views_database_connection_is_closed_with_its_request(
    tmp_path, url, content, code
):
    database = str(tmp_path / "db.sqlite3")
    sqlite3.connect(database).close()
    env = {"DJANGO_SETTINGS_MODULE": "tests.project.db_settings", "PDFPOOL_TEST_DB": database}
    pdfpool = {"MAX_UPLOAD_SIZE": MiB, "REFUSAL_VIEW": "tests.project.views.db_refusal"}
    with uvicorn(DOOR_ASGI, pdfpool=pdfpool, env=env) as server:
        headers = {"content-type": "application/x-www-form-urlencoded"}
        response = httpx.post(f"{server.url}{url}", content=content, headers=headers, timeout=30)
        assert (response.status_code, response.text) == (499, f"{code}: 0 tables")
        wait_for(lambda: opened(server.pid, database) == 0, 5.0)
