"""Under CI=true a skip for want of chromium, redis-server or the corpus fails the run
(tests/support/ci_strict.py); elsewhere it stays a skip, and other skips stay skips everywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ci_strict import in_ci

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import pytest

def test_needs_chromium():
    pytest.skip("Debian's chromium is not at /usr/bin/chromium: `apt-get install chromium`")

def test_needs_redis():
    pytest.skip("redis-server is not installed (apt-get install redis-server)")

@pytest.mark.skipif(True, reason="no corpus at /nowhere/shared/corpus")
def test_needs_the_corpus():
    pass

def test_needs_a_corpus_file():
    pytest.skip("004-pdflatex-4-pages/pdflatex-4-pages.pdf missing from the corpus")

@pytest.fixture
def redis_server():
    pytest.skip("redis-server is not installed (apt-get install redis-server)")

def test_needs_redis_through_a_fixture(redis_server):
    pass

def test_needs_an_optional_engine():
    pytest.importorskip("no_such_engine_module")

def test_passes():
    pass
"""


def run_probe(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci is not None:
        env["CI"] = ci
    options = ["-p", "no:cacheprovider", "-p", "tests.support.ci_strict", "-q", "-rfEs"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def summary(output: str) -> str:
    return re.findall(r"^=* ?(\d+ \w+.*) in [\d.]+s", output, re.M)[-1]


def test_under_ci_a_missing_requirement_fails_and_other_skips_stay(tmp_path):
    output = run_probe(tmp_path, "true")
    assert summary(output) == "3 failed, 1 passed, 1 skipped, 2 errors", output
    failure = r"^(?:FAILED|ERROR) \S+::(\w+) - CI=true: a missing requirement"
    failed = re.findall(failure, output, re.M)
    assert sorted(failed) == [
        "test_needs_a_corpus_file",
        "test_needs_chromium",
        "test_needs_redis",
        "test_needs_redis_through_a_fixture",
        "test_needs_the_corpus",
    ], output
    assert re.search(r"^SKIPPED .*no_such_engine_module", output, re.M), output


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_elsewhere_they_skip_cleanly(tmp_path, ci):
    output = run_probe(tmp_path, ci)
    assert summary(output) == "1 passed, 6 skipped", output


def test_ci_is_read_from_the_environment():
    assert [in_ci({"CI": value}) for value in ("true", "True", "1", "yes")] == [True] * 4
    assert [in_ci({"CI": value}) for value in ("", "false", "0", "no")] == [False] * 4
    assert in_ci({}) is False


def test_the_ci_entry_point_sets_ci_unless_set():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert lines[-2:] == ['export CI="${CI:-true}"', "make test"]
