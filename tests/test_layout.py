"""The package's shape, as docs/architecture.md draws it: three layers whose imports run one
way, and no import circle. (Module size is not a rule: a module is one concept and its size
follows the concept; the old 400-line limit is withdrawn, CONTRIBUTING.md.)

Read from the source with ``ast`` (every import counts: module-level, inside functions and
under ``TYPE_CHECKING``), so a lazy import cannot hide a wrong dependency.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_pdfpool"

ADMISSION = "django_pdfpool.admission"
SANDBOX = "django_pdfpool.sandbox"
# what every layer may import
SHARED = {"django_pdfpool", "django_pdfpool.exceptions", "django_pdfpool.bounds"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module (of any package) that ``name`` imports, by its full dotted name."""
    names: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _own(imported: str) -> str | None:
    """The package module an imported name belongs to, or None if it is not ours."""
    owners = [m for m in MODULES if imported == m or imported.startswith(m + ".")]
    return max(owners, key=len) if owners else None


GRAPH = {
    name: {own for own in map(_own, _imports(name, path)) if own and own != name}
    for name, path in MODULES.items()
}


def _in(layer: str, name: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def test_the_layout_is_what_the_architecture_page_draws():
    assert any(_in(ADMISSION + ".redis", m) for m in MODULES)
    assert any(_in(SANDBOX, m) for m in MODULES)
    assert len(MODULES) > 30  # the walk found the package


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _in(ADMISSION, m)))
def test_the_admission_rules_import_no_django_no_pdf_engine_and_no_sandbox(name):
    outside = {i.split(".")[0] for i in _imports(name, MODULES[name])}
    assert not outside & {"django", "asgiref", "pypdf", "pypdfium2"}, name
    assert all(_in(ADMISSION, own) or own in SHARED for own in GRAPH[name]), GRAPH[name]


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _in(SANDBOX, m)))
def test_the_sandbox_imports_no_django_and_no_admission_rules(name):
    outside = {i.split(".")[0] for i in _imports(name, MODULES[name])}
    assert not outside & {"django", "asgiref", "redis"}, name
    assert all(_in(SANDBOX, own) or own in SHARED for own in GRAPH[name]), GRAPH[name]


def test_the_redis_pool_is_only_imported_lazily_outside_its_subpackage():
    """redis-py is an optional extra: nothing imported by ``import django_pdfpool.admission``
    or the Django side at start-up may import it."""
    eager = {"django_pdfpool", "django_pdfpool.admission", "django_pdfpool.configured"}
    for name in eager:
        tree = ast.parse(MODULES[name].read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not any("redis" in ast.unparse(n) for n in top), name


# packages whose names load on first use (``__getattr__``): importing one runs none of its modules
LAZY = {"django_pdfpool", ADMISSION, SANDBOX}


def test_there_is_no_import_circle():
    """Tarjan's strongly connected components: any component of two or more is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node] - LAZY:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert circles == []


# --- tests/ laid out like the package (CONTRIBUTING.md, "Where a rule's test lives") -------

TESTS = PACKAGE.parent / "tests"
# A glue module (the package's top level) is tested in tests/test_<module>.py; where that
# file does not exist (yet), in the file named here.
GLUE_TESTS = {
    "admin": "tests/status/test_page.py",  # the admin's status page
    "apps": "tests/test_uploads.py",  # ready(): the start-up sweep of stale uploads
    "bounds": "tests/test_conf.py",  # the bounds the settings and the lower layers share
    "exceptions": "tests/admission/test_jobs.py",
    "models": "tests/status/test_page.py",  # the permission to see the status page
    "pool": "tests/test_pool_conformance.py",  # the given test's path to the local pool
}
# A subpackage is tested in the folder of the same path under tests/, or in the one here.
SUBPACKAGE_TESTS = {"management.commands": "tests/management"}
# Folders of tests/ that mirror no subpackage, and top-level test files for no one module.
NOT_MIRRORS = {"e2e", "support", "project"}
PACKAGE_WIDE = {  # and test_docs*.py: the docs against the code
    "test_layout.py",
    "test_typing.py",
    "test_public_paths.py",
    "test_counters.py",
    "test_module_names.py",
    "test_pool_conformance.py",  # the given test, both pools, at the path it was given
}
# Words that name an audit or the history, not a subject.
HISTORY = re.compile(r"security|issue|finding|audit|extras|cases|regression|fixes|session")


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py"))


GLUE = sorted(
    m.removeprefix("django_pdfpool.")
    for m, p in MODULES.items()
    if p.parent == PACKAGE and p.name != "__init__.py"
)
SUBPACKAGES = sorted(
    m.removeprefix("django_pdfpool.")
    for m, p in MODULES.items()
    if p.name == "__init__.py" and m != "django_pdfpool"
)


@pytest.mark.parametrize("module", GLUE)
def test_every_glue_module_has_its_test_module(module):
    own = TESTS / f"test_{module}.py"
    named = GLUE_TESTS.get(module)
    assert own.exists() or (named and (PACKAGE.parent / named).exists()), (
        f"django_pdfpool/{module}.py: add tests/test_{module}.py (or a line to GLUE_TESTS)"
    )


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_every_subpackage_has_its_test_folder(subpackage):
    folder = PACKAGE.parent / SUBPACKAGE_TESTS.get(
        subpackage, "tests/" + subpackage.replace(".", "/")
    )
    assert folder.is_dir() and any(folder.glob("test_*.py")), f"{subpackage}: no tests in {folder}"


def test_every_test_folder_mirrors_a_subpackage_and_is_a_package():
    for folder in sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(TESTS)
        assert (folder / "__init__.py").exists(), f"tests/{relative}: no __init__.py"
        if relative.parts[0] in NOT_MIRRORS:
            continue
        assert (PACKAGE / relative / "__init__.py").exists(), (
            f"tests/{relative} mirrors no subpackage of django_pdfpool"
        )


def test_top_level_test_files_are_named_for_a_glue_module():
    for path in sorted(TESTS.glob("test_*.py")):
        stem = path.stem.removeprefix("test_")
        named = (
            path.name in PACKAGE_WIDE
            or stem.split("_")[0] == "docs"
            or any(stem == m or stem.startswith(m + "_") for m in GLUE)
        )
        assert named, f"tests/{path.name}: name it for the glue module it tests, or move it"


def test_no_test_file_is_named_for_an_audit_or_the_history():
    for path in _test_files():
        relative = path.relative_to(TESTS)
        assert not HISTORY.search(str(relative)), f"tests/{relative}: name it for its subject"
        first = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n")[0]
        assert not re.match(r"(issue|finding)s? \d", first, re.I), f"tests/{relative}: {first}"
