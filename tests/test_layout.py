"""The package's shape, as docs/architecture.md draws it: three layers whose imports run one
way, and no import circle. (Module size is not a rule: a module is one concept and its size
follows the concept; the old 400-line limit is withdrawn, CONTRIBUTING.md.)

Read from the source with ``ast`` (every import counts: module-level, inside functions and
under ``TYPE_CHECKING``), so a lazy import cannot hide a wrong dependency.
"""

from __future__ import annotations

import ast
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
    """redis-py is an optional extra: nothing imported by ``import django_pdfpool.pool``
    or the Django side at start-up may import it."""
    eager = {"django_pdfpool", "django_pdfpool.configured"}
    for name in eager:
        tree = ast.parse(MODULES[name].read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not any("redis" in ast.unparse(n) for n in top), name


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
        for nxt in GRAPH[node] - {"django_pdfpool"}:  # the package's lazy __getattr__
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
