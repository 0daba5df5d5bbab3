"""The quick benchmarks run to their tables: a benchmark whose requests the package now answers
otherwise fails here, not silently in a later measuring session. Their figures are not judged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("bench", "says"),
    [
        ("bench_pool.py", "| refusal CallerBusy, median |"),
        ("bench_door.py", "an upload refused from its headers (503, pool closed)"),
        ("bench_redis.py", "| refusal CallerBusy, median us |"),
    ],
)
def test_a_quick_benchmark_runs_to_its_last_figure(bench, says):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # each benchmark sets up its own
    run = subprocess.run(
        [sys.executable, f"benchmarks/{bench}", "--quick"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert says in run.stdout, run.stdout[-3000:]
