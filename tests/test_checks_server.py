"""W041 (checks.py): a server that serves one request at a time per process turns the
pool's rules off (no two uploads meet), and the check says so where it can see it: inside
a real gunicorn process started with one sync worker, in ``manage.py check`` beside a
deployment's gunicorn.conf.py (read, never run) or GUNICORN_CMD_ARGS, and under runserver
--nothreading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from django_pdfpool.checks import check_server
from tests.support.servers import project_env

pytest.importorskip("gunicorn")

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = str(Path(sys.executable).parent / "gunicorn")
SOON = 120

# a WSGI module whose loading runs `manage.py check` in the process that loads it
CHECKED_APP = """
import django
from django.core.management import call_command

django.setup()
call_command("check")

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()
"""


def run(command: list[str], cwd: Path, **env: str) -> str:
    """``command`` with the test project's settings, in ``cwd``: what it printed."""
    environ = {k: v for k, v in os.environ.items() if k != "GUNICORN_CMD_ARGS"}
    environ |= {
        "DJANGO_SETTINGS_MODULE": "tests.project.settings",
        "PYTHONPATH": os.pathsep.join([str(cwd), str(ROOT)]),
        **project_env(None),
        **env,
    }
    done = subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=SOON
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        (["--workers", "1"], True),  # plain `gunicorn project.wsgi`: one sync worker
        (["--workers", "2", "--worker-class", "sync"], True),
        (["--workers", "1", "--threads", "4"], False),  # gthread: requests meet
    ],
    ids=["one-sync-worker", "sync-workers", "threads"],
)
def test_a_gunicorn_process_checks_its_own_command_line(tmp_path, options, warned):
    """A real gunicorn loads the application (``--check-config``: in its own process, from
    its own argv and settings), and the application runs ``manage.py check``."""
    (tmp_path / "checked.py").write_text(CHECKED_APP)
    said = run([GUNICORN, "--check-config", *options, "checked:application"], tmp_path)
    assert ("django_pdfpool.W041" in said) is warned, said
    if warned:
        assert "gunicorn's sync worker with one thread" in said
        assert "pool's slots" in said and "worker is busy" not in said


@pytest.mark.parametrize(
    ("config", "env", "warned"),
    [
        ("workers = 3\n", None, True),
        ("workers = 3\nthreads = 4\n", None, False),
        ("worker_class = 'gthread'\nthreads = 8\n", None, False),
        ("threads = 4\n", "--threads 1", True),  # the environment overrides the file
        (None, "--workers 2", True),
        (None, "--threads 2", False),
        (None, None, False),  # nothing says gunicorn serves the project
        ("import os\nworkers = os.cpu_count() * 2 + 1\n", None, True),  # not what decides
        ("import os\nthreads = os.cpu_count()\n", None, False),  # computed: cannot tell
        ("if True:\n    worker_class = 'sync'\n", None, False),  # in a branch: cannot tell
        ("from base import *\n", None, False),  # anything may come with it: cannot tell
    ],
)
def test_manage_py_check_reads_the_deployments_gunicorn_settings(tmp_path, config, env, warned):
    if config is not None:
        (tmp_path / "gunicorn.conf.py").write_text(config)
    extra = {} if env is None else {"GUNICORN_CMD_ARGS": env}
    said = run([sys.executable, "-m", "django", "check"], tmp_path, **extra)
    assert ("django_pdfpool.W041" in said) is warned, said


def test_the_check_reads_the_gunicorn_config_and_never_runs_it(tmp_path):
    """A config file's code runs in gunicorn, not in ``manage.py check`` (nor migrate, nor a
    test run): its literal settings are read, its side effects never happen."""
    marker = tmp_path / "ran"
    config = f"open({str(marker)!r}, 'w').write('ran at check time')\nworkers = 2\n"
    (tmp_path / "gunicorn.conf.py").write_text(config)
    said = run([sys.executable, "-m", "django", "check"], tmp_path)
    assert "django_pdfpool.W041" in said, said  # workers = 2, sync: read all the same
    assert not marker.exists()


def test_runserver_without_threads_is_warned(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver", "--nothreading"])
    [warning] = check_server()
    assert warning.id == "django_pdfpool.W041" and warning.msg.startswith("runserver")
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver"])
    assert check_server() == []


@pytest.mark.parametrize("flag", ["--nothreading", "--nothr", "--not"])
def test_runserver_told_no_threads_in_any_spelling_argparse_takes_is_warned(monkeypatch, flag):
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver", "8000", flag])
    assert [w.id for w in check_server()] == ["django_pdfpool.W041"]


def test_daphnes_runserver_serves_concurrently_without_threads(monkeypatch, settings):
    """With daphne installed first, ``runserver`` is daphne's ASGI server: no warning."""
    settings.INSTALLED_APPS = ["daphne", *settings.INSTALLED_APPS]
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver", "--nothreading"])
    assert check_server() == []
