"""One meaning per name: no two modules of the package share a file name, and no public
top-level name (class, function, constant, alias) is defined in two modules, but the
exceptions below, each with its reason. Read from the source with ``ast``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "django_pdfpool"

SHARED_FILE_NAMES = {
    "__init__",  # every package has one
}

SHARED_NAMES = {
    # each framework's adaptor of one concept, under the name its users know
    "pdf_pooled",  # decorators.py, contrib/drf.py, contrib/ninja.py
    "door_answer",  # contrib/drf.py, contrib/ninja.py
    "door_authenticate",  # contrib/drf.py, contrib/ninja.py
}


def _modules() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if "migrations" not in path.parts]


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, getattr(ast, "TypeAlias", ())):  # `type X = ...`, 3.12+
            names.add(ast.unparse(node.name))
    return {name for name in names if not name.startswith("_") and name not in {"logger"}}


def test_no_two_modules_share_a_file_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        where[path.stem].append(path.relative_to(PACKAGE).as_posix())
    shared = {stem: found for stem, found in where.items() if len(found) > 1}
    assert set(shared) <= SHARED_FILE_NAMES, shared


def test_each_public_top_level_name_is_defined_in_one_module() -> None:
    where: dict[str, set[str]] = defaultdict(set)
    for path in _modules():
        for name in _top_level_names(ast.parse(path.read_text())):
            where[name].add(path.relative_to(PACKAGE).as_posix())
    shared = {name: found for name, found in where.items() if len(found) > 1}
    assert {name: found for name, found in shared.items() if name not in SHARED_NAMES} == {}


def test_the_check_catches_a_name_defined_twice() -> None:
    tree = ast.parse("Job = int\nclass Answer: ...\ndef run_job(): ...\n_private = 1\n")
    assert _top_level_names(tree) == {"Job", "Answer", "run_job"}
