"""The children's environment: minimal, plus the names passed (SANDBOX["CHILD_ENV"], checked)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox.children import BASE_ENV
from tests.support import pdfs
from tests.support.sandbox import run


def wait_for_spare(timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not sandbox.idle_pids():
        assert time.monotonic() < deadline, "no spare started"
        time.sleep(0.01)
    return sandbox.idle_pids()[0]


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_children_get_a_minimal_environment_and_the_names_passed(monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "not-for-children")
    monkeypatch.setenv("DATABASE_URL", "postgres://app:hunter2@db/app")
    monkeypatch.setenv("PYTHONSTARTUP", "/nowhere.py")
    monkeypatch.setenv("PDFPOOL_PASSED", "yes")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    sandbox.configure(warm=False, child_env=("PDFPOOL_PASSED",))
    try:
        sandbox.configure(warm=True)
        sandbox.prewarm()
        env = environ_of(wait_for_spare())
        assert "DJANGO_SECRET_KEY" not in env and "DATABASE_URL" not in env
        assert "PYTHONSTARTUP" not in env
        assert env["PDFPOOL_PASSED"] == "yes" and env["LC_ALL"] == "C.UTF-8"
        assert set(env) <= {*BASE_ENV, "PDFPOOL_PASSED"} | {k for k in env if k[:3] == "LC_"}
        assert run(pdfs.simple(["still works"])).text == "still works"
    finally:
        sandbox.configure(child_env=())
    sandbox.prewarm()
    env = environ_of(wait_for_spare())  # the spare of the old environment was replaced
    assert "PDFPOOL_PASSED" not in env


def test_child_env_names_are_checked():
    with pytest.raises(ValueError):
        sandbox.configure(child_env=("A=B",))


def test_the_pool_passes_child_env_from_the_settings(pdfpool, monkeypatch):
    from django_pdfpool import get_pool

    pdfpool(SANDBOX={"CHILD_ENV": ["PDFPOOL_FROM_SETTINGS"]})
    get_pool()
    assert sandbox._template.env == ("PDFPOOL_FROM_SETTINGS",)
    pdfpool()
    get_pool()
    assert sandbox._template.env == ()
