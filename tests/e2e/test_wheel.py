"""The built wheel, not the source tree: build the sdist and the wheel (the wheel from the
sdist, as `python -m build` does), install the wheel into a fresh virtualenv outside the
tree, and follow docs/quickstart.md there (its titled blocks are the project's files):
`migrate`, `check --deploy` with no django_pdfpool check firing, one extraction through a
`@pdf_pooled` view with CSRF enforced, the admin status page for a superuser with its static
files, and `collectstatic`.

One virtualenv per session; pip's cache and the machine's configured indexes make the
install take seconds after the first run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support import pdfs
from tests.test_docs import fences_of

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_pdfpool"
QUICKSTART = ROOT / "docs" / "quickstart.md"
SHIPPED = {".py", ".lua", ".css", ".js", ".html", ".typed"}


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without what points at the source tree or the suite's settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONHOME"}
        and not key.startswith("PDFPOOL")
    }
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def _run(command: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=cwd, env=_clean_env(**extra), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    (built,) = out.glob("django_pdfpool-*.whl")
    return built


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its dependencies, and nothing of this tree."""
    home = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", str(home)], cwd=home.parent)
    _run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=home)
    return home


@pytest.fixture(scope="session")
def project(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/quickstart.md followed: `startproject`, then each titled block into its file
    ("(at the end)": appended), then `migrate`."""
    where = tmp_path_factory.mktemp("newproject")
    _run([str(venv / "bin" / "django-admin"), "startproject", "mysite", "."], cwd=where)
    titled = [block for block in fences_of(QUICKSTART).blocks if block.title]
    assert {block.title for block in titled} >= {
        "mysite/settings.py (at the end)",
        "mysite/views.py",
        "mysite/urls.py",
    }
    for block in titled:
        assert block.title is not None
        name, _, how = block.title.partition(" ")
        target = where / name
        if how == "(at the end)":
            target.write_text(target.read_text() + "\n" + block.body + "\n")
        else:
            target.write_text(block.body + "\n")
    _run([str(venv / "bin" / "python"), "manage.py", "migrate", "--noinput"], cwd=where)
    return where


def in_project(venv: Path, project: Path, code: str, **env: str) -> dict:
    """Run ``code`` with the project's settings in the virtualenv; it prints one JSON line."""
    preamble = "import django, json\ndjango.setup()\n"
    done = _run(
        [str(venv / "bin" / "python"), "-c", preamble + code],
        cwd=project,
        DJANGO_SETTINGS_MODULE="mysite.settings",
        **env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    """Templates, static files, migrations, the Lua scripts, py.typed, every module."""
    expected = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix in SHIPPED and "__pycache__" not in path.parts
    }
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith("django_pdfpool/")}
    assert expected - shipped == set()
    assert "django_pdfpool/py.typed" in shipped
    assert any(name.endswith(".lua") for name in shipped)
    assert "django_pdfpool/migrations/0001_initial.py" in shipped
    with zipfile.ZipFile(wheel) as archive:
        assert any(name.endswith(".dist-info/licenses/LICENSE") for name in archive.namelist())


def test_the_sdist_holds_the_package_and_its_metadata_not_part_of_the_tests(wheel: Path) -> None:
    """setuptools would add the top-level tests/test_*.py alone: a suite that cannot import
    its own support modules."""
    (sdist,) = wheel.parent.glob("django_pdfpool-*.tar.gz")
    with tarfile.open(sdist) as archive:
        tops = {name.split("/")[1] for name in archive.getnames() if name.count("/") >= 1}
    assert tops == {
        "PKG-INFO", "LICENSE", "README.md", "MANIFEST.in", "pyproject.toml", "setup.cfg",
        "django_pdfpool", "django_pdfpool.egg-info",
    }  # fmt: skip


def test_the_package_comes_from_the_virtualenv(venv: Path, project: Path) -> None:
    found = in_project(
        venv, project, "import django_pdfpool\nprint(json.dumps(django_pdfpool.__file__))"
    )
    assert Path(found).is_relative_to(venv), found
    assert not Path(found).is_relative_to(ROOT)


def test_migrate_created_the_status_permission(venv: Path, project: Path) -> None:
    code = (
        "from django.contrib.auth.models import Permission\n"
        "print(json.dumps(Permission.objects.filter("
        "content_type__app_label='django_pdfpool').count()))"
    )
    assert in_project(venv, project, code) >= 1


def _checks(venv: Path, project: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "manage.py", "check", *args],
        cwd=project,
        env=_clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_no_django_pdfpool_check_fires_on_deploy(venv: Path, project: Path) -> None:
    assert "no issues" in _checks(venv, project)
    report = _checks(venv, project, "--deploy")
    assert "django_pdfpool." not in report, report


def test_the_installed_checks_do_fire_on_a_bad_setting(venv: Path, project: Path) -> None:
    """The negative of the test above: the installed app's checks are live."""
    bad = project / "mysite" / "bad_settings.py"
    bad.write_text('from mysite.settings import *\nPDFPOOL = {"SLOTS": 0}\n')
    report = _checks(venv, project, "--deploy", DJANGO_SETTINGS_MODULE="mysite.bad_settings")
    assert "django_pdfpool.E003" in report, report


def test_one_extraction_through_the_quickstart_view(
    venv: Path, project: Path, tmp_path: Path
) -> None:
    """As the page's `curl` line does it: a multipart POST with no CSRF token."""
    pdf = tmp_path / "hello.pdf"
    pdf.write_bytes(pdfs.simple(["Hello from the wheel", "page two"]))
    (tmp_path / "html.pdf").write_bytes(pdfs.html())
    code = f"""
from django.test import Client
client = Client(enforce_csrf_checks=True, HTTP_HOST="127.0.0.1:8000")  # as runserver sees curl
answers = []
for name in ("hello.pdf", "html.pdf"):
    with open({str(tmp_path)!r} + "/" + name, "rb") as upload:
        response = client.post("/api/extract/", {{"file": upload}})
    answers.append([response.status_code, response.json()])
print(json.dumps(answers))
"""
    (ok, body), (refused, error) = in_project(venv, project, code)
    assert ok == 200, body
    assert body["pages"] == 2
    assert "Hello from the wheel" in body["text"]
    assert refused == 422
    assert error["error"] == "not_a_pdf"


def test_the_status_page_renders_for_a_superuser(venv: Path, project: Path) -> None:
    code = """
from pathlib import Path
import django_pdfpool
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client
from django.templatetags.static import static
admin = User.objects.filter(username="admin").first() or User.objects.create_superuser(
    "admin", "admin@example.com", "a password of no importance")
client = Client(HTTP_HOST="127.0.0.1:8000")
client.force_login(admin)
response = client.get("/admin/django_pdfpool/poolstatus/")
installed = Path(django_pdfpool.__file__).parent / "static"
names = ["django_pdfpool/status.css", "django_pdfpool/status.js"]
print(json.dumps({
    "status": response.status_code,
    "html": response.content.decode(),
    "urls": [static(name) for name in names],
    "installed": [(installed / name).is_file() for name in names],
    "found": [finders.find(name) for name in names],
    "package": str(Path(django_pdfpool.__file__).parent),
}))
"""
    page = in_project(venv, project, code)
    assert page["status"] == 200
    assert page["installed"] == [True, True]
    for url, found in zip(page["urls"], page["found"], strict=True):
        assert f'"{url}"' in page["html"], url
        assert found and found.startswith(page["package"])
    assert 'id="pdfpool-status"' in page["html"]


def test_collectstatic_gathers_the_status_files(venv: Path, project: Path) -> None:
    _run([str(venv / "bin" / "python"), "manage.py", "collectstatic", "--noinput"], cwd=project)
    for name in ("status.css", "status.js"):
        assert (project / "staticfiles" / "django_pdfpool" / name).is_file()
