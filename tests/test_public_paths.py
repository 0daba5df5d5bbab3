"""The public surface: at most fifteen names in ``django_pdfpool.__all__``, each loaded from
its module on first use, so that ``import django_pdfpool`` imports no Django; every exception
in ``django_pdfpool.exceptions``; the pools in ``django_pdfpool.admission``, the sandbox's
controls in ``django_pdfpool.sandbox``; and every dotted path the docs name imports.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import django_pdfpool
from django_pdfpool import exceptions

ROOT = Path(__file__).resolve().parent.parent
MOST_NAMES = 15
PUBLIC_MODULES = (
    "django_pdfpool",
    "django_pdfpool.admission",
    "django_pdfpool.asgi",
    "django_pdfpool.exceptions",
    "django_pdfpool.responses",
    "django_pdfpool.sandbox",
)
# each framework's exceptions subclass its own classes, so they live with the integration
INTEGRATIONS = ("django_pdfpool.contrib.",)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (nothing imported yet), warnings as errors."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _is_exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def test_the_package_exports_few_names_and_no_exception() -> None:
    names = django_pdfpool.__all__
    assert len(names) <= MOST_NAMES, f"{len(names)} public names: {names}"
    assert len(set(names)) == len(names)
    assert not [name for name in names if _is_exception(getattr(django_pdfpool, name))]
    assert not hasattr(django_pdfpool, "PoolBusy")  # from django_pdfpool.exceptions only


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_each_public_name_resolves_to_an_object_of_the_package(module: str) -> None:
    imported = importlib.import_module(module)
    for name in imported.__all__:
        value = getattr(imported, name)
        if inspect.isclass(value) or inspect.isfunction(value):  # not an alias or a constant
            assert value.__module__.startswith("django_pdfpool."), f"{module}.{name}"
    with pytest.raises(AttributeError, match="no_such_name"):
        imported.no_such_name  # noqa: B018


def test_the_public_modules_import_neither_django_nor_redis_nor_the_sandbox() -> None:
    code = """
import sys
import django_pdfpool, django_pdfpool.admission, django_pdfpool.exceptions, django_pdfpool.sandbox
eager = sorted(m for m in sys.modules if m.partition(".")[0] in ("django", "redis")
               or m.startswith(("django_pdfpool.sandbox.", "django_pdfpool.admission.")))
print(eager)
"""
    done = _python(code)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_pool_and_a_control_load_on_first_use() -> None:
    code = """
import sys
from django_pdfpool.admission import Pool
from django_pdfpool.sandbox import configure
assert "redis" not in sys.modules, "the Redis pool loaded with the local one"
from django_pdfpool.admission import RedisPool
assert RedisPool.__module__ == "django_pdfpool.admission.redis.redis_pool"
assert Pool.__module__ == "django_pdfpool.admission.local"
print(configure.__module__)
"""
    done = _python(code)
    assert done.stdout.strip() == "django_pdfpool.sandbox.extract", done.stderr


def test_the_exceptions_module_holds_every_exception_of_the_package() -> None:
    """Every module imported: an exception class defined anywhere but ``exceptions`` (or an
    integration) fails here, as does one of ``exceptions`` missing from its ``__all__``."""
    elsewhere = []
    for info in pkgutil.walk_packages(django_pdfpool.__path__, "django_pdfpool."):
        module = importlib.import_module(info.name)
        elsewhere += [
            f"{info.name}.{name}"
            for name, value in vars(module).items()
            if _is_exception(value) and value.__module__ == info.name
        ]
    assert elsewhere, "the scan found no exception at all"
    assert [name for name in elsewhere if not name.startswith(INTEGRATIONS)] == [
        f"{exceptions.__name__}.{name}"
        for name, value in vars(exceptions).items()
        if _is_exception(value) and value.__module__ == exceptions.__name__
    ]
    defined = {name for name, value in vars(exceptions).items() if _is_exception(value)}
    assert defined <= set(exceptions.__all__)


NOT_PATHS = re.compile(r"django_pdfpool\.([EW]\d{3}|view_pool_status)$")  # checks, permission


def _documented_paths() -> dict[str, str]:
    """Every ``django_pdfpool.<dotted>`` the docs, README and example project name (not the
    changelog, which names the paths that are gone), with a file that names it."""
    sources = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    sources += [
        p for p in (ROOT / "example_project").rglob("*") if p.suffix in {".py", ".html", ".md"}
    ]
    found: dict[str, str] = {}
    for path in sources:
        if path.name == "changelog.md":
            continue
        text = path.read_text()
        dotted = re.findall(r"django_pdfpool(?:\.[A-Za-z_]\w*)+", text)
        for module, names in re.findall(r"from (django_pdfpool[\w.]*) import ([\w, ]+)", text):
            dotted += [f"{module}.{name.strip()}" for name in names.split(",") if name.strip()]
        for each in dotted:
            if not NOT_PATHS.match(each):
                found.setdefault(each, str(path.relative_to(ROOT)))
    return found


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[i:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("dotted,where", sorted(_documented_paths().items()))
def test_every_path_the_docs_name_imports_without_a_warning(dotted: str, where: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _resolve(dotted) is not None, where
