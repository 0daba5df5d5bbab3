"""Extraction cost: a job through the sandbox against pypdf in the server's own process, as a
ratio to its file's in-process time, all in one run.

    python benchmarks/bench_extract.py [CORPUS_DIR] [--repeat N]

Modes (the table's rows), taken file by file in turn: **in process** (pypdf in this process);
**forked, ready child** (the default: a child forked from the warm template and rehearsed
ahead); **forked on request** (a job after ``READY_IDLE`` seconds without one); **cold** (a new
interpreter per job, ``warm=False``); each forked or cold mode also **with the sandbox off**
(no Landlock, seccomp, namespaces, no-new-privs or not-dumpable): the sandbox's cost. Then the
resident memory of what the sandbox keeps between jobs. Documents: the corpus' files up to
200 KB and its 117-page file.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*

from pypdf import PdfReader

from benchmarks.loadkit import DEFAULT_CORPUS, HEAVY, machine, percentile
from django_pdfpool import extract
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox.children import Template
from django_pdfpool.sandbox.engines import WARM_UP_PDF
from django_pdfpool.sandbox.wire import SANDBOX_OFF

LIMITS = {"timeout": 120.0, "memory_limit": 1 << 30}
SMALL_MAX = 200_000  # bytes: the corpus' small files


def template(sandbox_on: bool, enabled: bool = True, ready: bool = True) -> Template:
    found = Template(enabled)
    found.sandbox = "none" if sandbox_on else SANDBOX_OFF
    found.max_ready = found.max_ready if ready else 0  # 0: as after READY_IDLE without a job
    return found


# mode: the sandbox's template for it (None: in process)
MODES: dict[str, Template | None] = {
    "in process": None,
    "forked, ready child": template(True),
    "forked on request": template(True, ready=False),
    "cold": template(True, enabled=False),
    "forked, ready child, sandbox off": template(False),
    "forked on request, sandbox off": template(False, ready=False),
    "cold, sandbox off": template(False, enabled=False),
}


def timed(path: Path) -> float:
    """Seconds pypdf takes in this process (encrypted or damaged: the failure is timed)."""
    start = time.perf_counter()
    with contextlib.suppress(Exception):
        reader = PdfReader(io.BytesIO(path.read_bytes()))
        [page.extract_text() for page in reader.pages]
        _ = reader.metadata
    return time.perf_counter() - start


async def job(mode: str, path: Path | bytes) -> float:
    """Seconds one job takes in `mode` (a failed extraction is timed too)."""
    source = MODES[mode]
    if source is None:
        return await asyncio.to_thread(timed, path)  # type: ignore[arg-type]
    sandbox._template = source  # the sandbox's children come from this mode's template
    start = time.perf_counter()
    with contextlib.suppress(ExtractionError):
        await extract(path, **LIMITS)
    return time.perf_counter() - start


async def settle(mode: str) -> None:
    """A ready child waiting for `mode`'s job, if it takes one, and none rehearsing anywhere."""
    source = MODES[mode]
    if source is not None and source.enabled and source.max_ready and len(source.idle_pids()) < 2:
        await job(mode, WARM_UP_PDF)  # its ready children exited (READY_IDLE): one is forked
        for _ in range(200):
            if len(source.idle_pids()) > 1:
                break
            await asyncio.sleep(0.005)
    for other in MODES.values():
        for pid in [] if other is None or not other.enabled else other.idle_pids()[1:]:
            for _ in range(1000):  # a ready child is listed from its fork, then rehearses
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_read"):
                        break
                await asyncio.sleep(0.001)


def mib(pid: int | str, field: str = "Pss:", where: str = "smaps_rollup") -> float:
    """MiB of a process: its proportional set (shared pages split among sharers), or RSS."""
    with open(f"/proc/{pid}/{where}") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field)) / 1024


def cell(values: list[float] | None) -> str:
    """A ratio's median, and its p95 in parentheses; "-" for a measure not taken."""
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({percentile(values, 0.95):.2f})"


def documents(corpus: Path) -> tuple[list[Path], Path]:
    """The corpus' small files and its big one."""
    if not (corpus / "files.json").exists():
        sys.exit(f"bench_extract needs the corpus of real PDFs at {corpus} (or CORPUS_DIR)")
    entries = json.loads((corpus / "files.json").read_text())["data"]
    paths = [corpus / e["path"] for e in entries if (corpus / e["path"]).exists()]
    return [p for p in paths if p.stat().st_size <= SMALL_MAX], corpus / HEAVY


async def bench(small: list[Path], big: Path, repeat: int) -> str:
    for path in [*small, big] * 2:  # in-process pypdf warmed up (lazy imports, caches)
        timed(path)
    base = {p: statistics.median(timed(p) for _ in range(5)) for p in [*small, big]}
    for source in MODES.values():  # every template started (a job before: cold)
        while source is not None and source.enabled and source.pid() is None:
            source.prewarm()
            await asyncio.sleep(0.01)
    for mode in MODES:  # every path taken once
        await job(mode, small[0])
    ratios: dict[tuple[str, str], list[float]] = {}
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}  # small files
    for path in small * repeat + [big] * 2:
        kind = "big" if path == big else "small"
        for mode in MODES:
            await settle(mode)
            took = await job(mode, path)
            ratios.setdefault((mode, kind), []).append(took / base[path])
            if path != big:
                seconds[mode].append(took)
    ready = MODES["forked, ready child"]
    assert ready is not None
    await settle("forked, ready child")
    template_pid, *ready_pids = ready.idle_pids()
    lines = [
        "| mode: ratio to in-process pypdf, median (p95) | small files | big file "
        "| small files: ms |",
        "|---|---:|---:|---:|",
    ]
    for mode in MODES:
        ms = statistics.median(seconds[mode]) * 1000
        small_cell, big_cell = cell(ratios.get((mode, "small"))), cell(ratios.get((mode, "big")))
        lines.append(f"| {mode} | {small_cell} | {big_cell} | {ms:.1f} |")
    ms = {mode: statistics.median(values) * 1000 for mode, values in seconds.items()}
    cost = ", ".join(
        f"{mode} {ms[mode] - ms[f'{mode}, sandbox off']:+.2f} ms"
        for mode in ("forked, ready child", "forked on request", "cold")
    )
    return "\n".join(
        [
            *lines,
            "",
            f"Small files: {len(small)} (in-process median "
            f"{statistics.median(base[p] for p in small) * 1000:.1f} ms), big: {big.name} "
            f"({base[big] * 1000:.0f} ms); {repeat} runs per small file and mode.",
            f"The sandbox's cost per job, small files (median, on - off): {cost}.",
            f"Memory: the template PSS {mib(template_pid):.0f} "
            f"MiB (at rest, the only process kept); its ready children now: {len(ready_pids)}, "
            f"PSS {sum(map(mib, ready_pids)):.0f} MiB in all; this process (pypdf in process): "
            f"RSS {mib('self', 'VmRSS:', 'status'):.0f} MiB.",
        ]
    )


def main() -> None:
    args, repeat = sys.argv[1:], 6
    if "--repeat" in args:
        repeat = int(args.pop(args.index("--repeat") + 1))
        args.remove("--repeat")
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # as quiet as in the child
    started = time.perf_counter()
    small, big = documents(Path(args[0]) if args else DEFAULT_CORPUS)
    try:
        print(asyncio.run(bench(small, big, repeat)))
    finally:
        for source in MODES.values():
            if source is not None:
                source.shutdown()
    print(f"{time.perf_counter() - started:.0f} s; {machine()}.")


if __name__ == "__main__":
    main()
