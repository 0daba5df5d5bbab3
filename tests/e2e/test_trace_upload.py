"""tools/trace_upload.py: one traced upload through the example project gives sane figures
(not today's numbers, which are meant to drop), and a name of its table that no longer
exists is reported, not a crash.

The tool configures the example's settings (``demo.settings``), which this test process
cannot switch to: its main function runs in a child process of its own."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "trace_upload.py"


def tool() -> ModuleType:
    """The tool's module, imported from its file (tools/ is no package)."""
    if "trace_upload" in sys.modules:
        return sys.modules["trace_upload"]
    spec = importlib.util.spec_from_file_location("trace_upload", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["trace_upload"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_one_upload_on_the_local_pool_gives_sane_figures() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDFPOOL_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # pytest-django's; the tool names the example's
    code = "import sys, runpy; sys.exit(runpy.run_path(sys.argv[1])['main'](['--json']))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(TOOL)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert figures["backend"] == "local"
    assert figures["status"] == 200 and figures["warm_up_status"] == 200
    assert figures["modules_entered"] == len(figures["modules"]) > 0
    assert all(name.startswith("django_pdfpool") for name in figures["modules"])
    assert "django_pdfpool.door" in figures["modules"]  # the door was on
    assert figures["calls"] == sum(figures["modules"].values()) == len(figures["sequence"])
    assert 0 < figures["module_changes"] < figures["calls"]
    for figure, counted in figures["counted"].items():  # the table names what exists
        assert counted["not_found"] == [], figure
    assert figures["counted"]["headers parsed"]["count"] >= 1  # every upload's, once at least
    assert figures["counted"]["caller resolved"]["count"] >= 1
    assert "pdfpool-jobs" in figures["threads"]  # the job loop's thread was traced


def test_a_name_that_no_longer_exists_is_reported_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace_upload = tool()
    renamed = {
        "headers parsed": ("django_pdfpool.record.UploadHeaders.renamed_away",),
        "settings read": ("django_pdfpool.conf.get_settings", "django_pdfpool.nowhere.f"),
    }
    monkeypatch.setattr(trace_upload, "COUNTED", renamed)
    targets = trace_upload.targets()
    assert [t.exists for t in targets] == [False, True, False]
    settings = targets[1]
    assert settings.code is None and settings.wrapped is not None  # a cached accessor
    tracer = trace_upload.Tracer(targets=targets, background=set())
    figures = trace_upload.figures_of(tracer, "local", 200, 200, True, None)
    assert figures.counted["headers parsed"]["not_found"] == [
        "django_pdfpool.record.UploadHeaders.renamed_away"
    ]
    assert figures.counted["settings read"]["not_found"] == ["django_pdfpool.nowhere.f"]
    assert "not found: django_pdfpool.nowhere.f" in trace_upload.report(figures)


def test_module_changes_count_each_call_into_another_module() -> None:
    changes = tool().changes
    assert changes([]) == changes(["a"]) == changes(["a", "a"]) == 0
    assert changes(["a", "b", "b", "a", "c"]) == 3
