"""The example project's middleware under ASGI: no thread hand-off per request
beyond Django's handler's own two, and the rules Django's classes keep (CSRF, the session
saved, static files) unchanged by running their hooks on the event loop."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.servers import uvicorn

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "example_project"
HANDLER_HOPS = 2  # Django's ASGIHandler: request_started, then response.close() (request_finished)


def hops(**env: str) -> dict[str, dict[str, float]]:
    """Hand-offs per request, counted by tests/support/count_hops.py in its own process."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.count_hops", "--json", "/", "/bench/health/"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.hops_settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_a_request_to_the_example_makes_no_hand_off_beyond_djangos_handler(tmp_path):
    found = hops(DEMO_STATE_DIR=str(tmp_path))
    for path, counted in found.items():
        assert counted["status"] == 200, path
        assert counted["sync_to_async"] <= HANDLER_HOPS, (path, counted)
        assert counted["async_to_sync"] == 0, (path, counted)


def test_djangos_middleware_as_it_ships_hands_off_at_every_hook(tmp_path):
    """The control: the same count over Django's and WhiteNoise's classes as they ship."""
    found = hops(DEMO_STATE_DIR=str(tmp_path), BENCH_MIDDLEWARE="classic")
    for path, counted in found.items():
        assert counted["sync_to_async"] >= 10, (path, counted)
        assert counted["async_to_sync"] == 1, (path, counted)


def manage(state: Path, *args: str) -> str:
    env = {**os.environ, "DEMO_STATE_DIR": str(state), "DJANGO_SETTINGS_MODULE": "demo.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def token(page: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match, "no CSRF token in the page"
    return match[1]


@pytest.fixture
def demo(tmp_path):
    manage(tmp_path, "migrate", "--noinput")
    output = manage(tmp_path, "ensure_demo_admin", "--base-url", "http://127.0.0.1:8000")
    match = re.search(r"Admin sign-in:\s+(\S+) / (\S+)", output)
    assert match, output
    env = {"DEMO_STATE_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "demo.settings"}
    with uvicorn(app="demo.asgi:application", cwd=PROJECT, env=env) as server:
        yield server.url, match[1], match[2]


def test_csrf_sessions_and_static_files_work_with_the_hooks_on_the_loop(demo):
    url, user, password = demo
    with httpx.Client(base_url=url, timeout=60) as client:
        css = client.get("/static/admin/css/base.css")  # ServeStatic, from the apps' folders
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        refused = client.post("/", data={"x": "1"})  # a form without its token
        assert refused.status_code == 403
        login = client.get("/admin/login/")
        assert login.status_code == 200 and "csrftoken" in client.cookies
        signed_in = client.post(
            "/admin/login/?next=/admin/",
            data={"csrfmiddlewaretoken": token(login.text), "username": user, "password": password},
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        assert "sessionid" in client.cookies  # saved by the session's hook, in a thread
        admin = client.get("/admin/")
        assert admin.status_code == 200 and "Log out" in admin.text
