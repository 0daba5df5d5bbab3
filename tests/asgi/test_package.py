"""``django_pdfpool.asgi``: the ASGI wrappers together (``lifespan``, ``door``, ``threads``),
the ASGI types in one module (``types``), the paths the docs promise, and the old
``django_pdfpool.door.asgi`` gone."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import django_pdfpool
from django_pdfpool import asgi
from django_pdfpool.asgi import door, lifespan, threads, types

PACKAGE = Path(django_pdfpool.__file__).parent
TYPES = {"Scope", "Message", "Receive", "Send", "ASGIApp"}


def test_the_wrappers_live_together_and_load_from_every_promised_path():
    assert asgi.PoolLifespan is lifespan.PoolLifespan is django_pdfpool.PoolLifespan
    assert asgi.PdfPoolDoor is door.PdfPoolDoor is django_pdfpool.PdfPoolDoor
    assert lifespan.PoolLifespan.__module__ == "django_pdfpool.asgi.lifespan"
    assert door.PdfPoolDoor.__module__ == "django_pdfpool.asgi.door"
    assert asgi.KeptThreads is threads.KeptThreads is django_pdfpool.KeptThreads
    assert threads.KeptThreads.__module__ == "django_pdfpool.asgi.threads"
    assert {"PoolLifespan", "PdfPoolDoor", "KeptThreads"} <= set(asgi.__all__)
    with pytest.raises(AttributeError):
        asgi.NoSuchWrapper  # noqa: B018


def test_the_asgi_types_are_declared_once_in_their_module():
    """Each ASGI type is assigned in ``asgi/types.py`` and nowhere else in the glue (the
    layers below know no ASGI; ``admission.snapshot.Scope`` is another concept, issue 25's
    names part); the wrappers use those very objects."""
    declared: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] in {"admission", "sandbox"}:
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in TYPES:
                    declared.setdefault(target.id, []).append(str(path.relative_to(PACKAGE)))
    assert declared == {name: ["asgi/types.py"] for name in TYPES}
    for name in TYPES:
        assert getattr(asgi, name) is getattr(types, name)
    assert lifespan.Scope is door.Scope is types.Scope
    assert door.Send is types.Send and lifespan.Receive is types.Receive


@pytest.mark.parametrize("name", ["PdfPoolDoor", "send_refusal", "send_response", "path_info"])
def test_the_door_asgi_path_is_gone(name):
    """Moved to ``django_pdfpool.asgi.door`` before the first release: no alias is left."""
    with pytest.raises(ModuleNotFoundError):
        exec(f"from django_pdfpool.door.asgi import {name}")
    assert getattr(door, name).__module__ == "django_pdfpool.asgi.door"


def test_the_door_package_holds_no_asgi_wrapper():
    assert not (PACKAGE / "door" / "asgi.py").exists()
    assert not (PACKAGE / "door" / "asgi").exists()
    assert django_pdfpool.PdfPoolDoor is door.PdfPoolDoor


def test_the_promised_paths_warn_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from django_pdfpool import PdfPoolDoor, PoolLifespan  # noqa: F401
        from django_pdfpool.asgi import PoolLifespan as Lifespan  # noqa: F401


def test_importing_the_asgi_package_imports_no_django():
    """Like ``import django_pdfpool``: the wrappers (and Django) load on first use."""
    code = "import sys, django_pdfpool.asgi; print('django' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
