"""The public import paths. One map in ``django_pdfpool/__init__.py`` serves the package's names
and the modules ``django_pdfpool.pool`` and ``django_pdfpool.extraction`` (no file of their
own, a ``.pyi`` for type checkers); a module renamed in this release keeps its old path for one
release, with a DeprecationWarning; and every dotted path the docs name imports.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import django_pdfpool

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_pdfpool"
SERVED = {f"django_pdfpool.{name}": homes for name, homes in django_pdfpool._PATHS.items()}
PATHS = {"django_pdfpool": django_pdfpool._HOMES, **SERVED}


def _home(home: str) -> ModuleType:
    return importlib.import_module(f"django_pdfpool.{home}")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (nothing imported yet), warnings as errors."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_public_path_serves_its_names_from_their_homes(path: str) -> None:
    module = importlib.import_module(path)
    assert sorted(module.__all__) == sorted(PATHS[path])
    for name, home in PATHS[path].items():
        assert getattr(module, name) is getattr(_home(home), name), f"{path}.{name}"
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_the_served_modules_import_every_way_without_django_or_redis() -> None:
    code = """
import sys
import django_pdfpool.pool
from django_pdfpool.pool import Pool, PoolBusy
from django_pdfpool import extraction
from django_pdfpool.extraction import *
import importlib
assert importlib.import_module("django_pdfpool.extraction").extract is extract
import importlib.util
assert importlib.util.find_spec("django_pdfpool.pool").name == "django_pdfpool.pool"
assert django_pdfpool.pool.Pool is Pool and extraction.PAGE_SEPARATOR is PAGE_SEPARATOR
assert not any(m.partition(".")[0] in ("django", "redis") for m in sys.modules), "eager"
from django_pdfpool.pool import RedisPool
assert RedisPool.__module__ == "django_pdfpool.admission.redis.redis_pool"
print("ok")
"""
    done = _python(code)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("name", sorted(django_pdfpool._PATHS))
def test_the_stub_types_exactly_the_served_names(name: str) -> None:
    """A type checker reads ``<name>.pyi``: the same names, imported from the same homes."""
    assert not (PACKAGE / f"{name}.py").exists(), "a file would shadow the served module"
    tree = ast.parse((PACKAGE / f"{name}.pyi").read_text())
    imported = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }
    (listed,) = (
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
    )
    homes = django_pdfpool._PATHS[name]
    assert sorted(listed) == sorted(homes) == sorted(imported)
    assert imported == homes


def test_a_type_checker_sees_the_served_modules_types(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(
        "from django_pdfpool.extraction import PAGE_SEPARATOR\n"
        "from django_pdfpool.pool import Pool\n"
        "reveal_type(Pool(2, 4, 1.0))\nreveal_type(PAGE_SEPARATOR)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert 'Revealed type is "django_pdfpool.admission.local.Pool"' in done.stdout, done.stdout
    assert 'Revealed type is "str"' in done.stdout, done.stdout


@pytest.mark.parametrize("old,new", sorted(django_pdfpool.RENAMED.items()))
def test_a_renamed_modules_old_path_is_gone(old: str, new: str) -> None:
    """Renamed before the first release, so no alias: the old path does not import, the new does."""
    assert f"django_pdfpool.{old}" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"django_pdfpool.{old}")
    assert _home(new).__all__


@pytest.mark.parametrize("old,new", sorted(django_pdfpool.RENAMED.items()))
def test_a_renamed_modules_old_import_statement_fails(old: str, new: str) -> None:
    name = _home(new).__all__[0]
    done = _python(f"from django_pdfpool.{old} import {name}")
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stderr, done.stderr


NOT_PATHS = re.compile(r"django_pdfpool\.([EW]\d{3}|view_pool_status)$")  # checks, permission


def _documented_paths() -> dict[str, str]:
    """Every ``django_pdfpool.<dotted>`` the docs, README and example project name (the
    changelog only in its "These paths still work"), with a file that names it."""
    texts = [
        (path, path.read_text())
        for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
        if path.name != "changelog.md"
    ]
    texts += [
        (path, path.read_text())
        for path in (ROOT / "example_project").rglob("*")
        if path.suffix in {".py", ".html", ".md"}
    ]
    changelog = ROOT / "docs" / "changelog.md"
    kept = re.search(r"\*\*These paths still work:\*\*(.*?)\n- \*\*", changelog.read_text(), re.S)
    assert kept is not None
    texts.append((changelog, kept.group(1)))
    found: dict[str, str] = {}
    for path, text in texts:
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
