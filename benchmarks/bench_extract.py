"""Extraction cost: each job in process (pypdf in the server's own process) against the same
job through the sandbox, as a ratio to its file's in-process time, all in one run.

    .venv/bin/python benchmarks/bench_extract.py [CORPUS_DIR] [--repeat N] [--burst N]

Modes (the table's rows; single jobs alternate mode by mode, bursts round by round):

- **in process**: pypdf in this process; in a burst, SLOTS threads (the GIL runs one at a time).
- **forked, ready child**: the template as configured by default hands the job a ready child,
  forked and rehearsed ahead, waiting on its job pipe (a job seconds after another).
- **forked on request**: the template forks the job's child when asked (a job after
  ``READY_IDLE`` seconds without one: its ready children are gone).
- **cold**: a new interpreter per job (``warm=False``, or while there is no template).
- the same three **with the sandbox off** (no Landlock, seccomp, namespaces, no-new-privs or
  not-dumpable): against them, what the sandbox costs a job. Single jobs, small files only.

Measures (the columns): single jobs, one at a time, `--repeat` runs per file and mode, with no
ready child rehearsing beside them; bursts of SLOTS workers (2, 4) taking jobs back to back,
`--burst` jobs over the small files, then SLOTS jobs of the big file at once. Every job's time
is divided by its file's in-process median (5 runs back to back, first). Then the resident
memory of the processes the sandbox keeps between jobs.

Documents: the corpus' files (small: up to 200 KB; big: the 117-page GeoTopo file); without a
corpus, the built-in one-page document and it repeated on 100 pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*

from pypdf import PdfReader, PdfWriter

from benchmarks.loadkit import DEFAULT_CORPUS, HEAVY, machine, percentile
from django_pdfpool import extract
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox.children import Template
from django_pdfpool.sandbox.engines import WARM_UP_PDF
from django_pdfpool.sandbox.wire import SANDBOX_OFF

LIMITS = {"timeout": 120.0, "memory_limit": 1 << 30}
SMALL_MAX = 200_000  # bytes: the corpus' small files
SLOTS = (2, 4)


def template(sandbox_on: bool, enabled: bool = True, ready: bool = True) -> Template:
    found = Template(enabled)
    found.sandbox = "none" if sandbox_on else SANDBOX_OFF
    found.max_ready = found.max_ready if ready else 0  # 0: as after READY_IDLE without a job
    return found


# mode: the sandbox's template for it (None: in process), and whether bursts run it
MODES: dict[str, tuple[Template | None, bool]] = {
    "in process": (None, True),
    "forked, ready child": (template(True), True),
    "forked on request": (template(True, ready=False), False),
    "cold": (template(True, enabled=False), True),
    "forked, ready child, sandbox off": (template(False), False),
    "forked on request, sandbox off": (template(False, ready=False), False),
    "cold, sandbox off": (template(False, enabled=False), False),
}
BURST_MODES = [mode for mode, (_, bursts) in MODES.items() if bursts]


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
    source = MODES[mode][0]
    if source is None:
        return await asyncio.to_thread(timed, path)  # type: ignore[arg-type]
    sandbox._template = source  # the sandbox's children come from this mode's template
    start = time.perf_counter()
    with contextlib.suppress(ExtractionError):
        await extract(path, **LIMITS)
    return time.perf_counter() - start


async def settle(mode: str) -> None:
    """A ready child waiting for `mode`'s job, if it takes one, and none rehearsing anywhere."""
    source = MODES[mode][0]
    if source is not None and source.enabled and source.max_ready and len(source.idle_pids()) < 2:
        await job(mode, WARM_UP_PDF)  # its ready children exited (READY_IDLE): one is forked
        for _ in range(200):
            if len(source.idle_pids()) > 1:
                break
            await asyncio.sleep(0.005)
    for other, _ in MODES.values():
        for pid in [] if other is None or not other.enabled else other.idle_pids()[1:]:
            for _ in range(1000):  # a ready child is listed from its fork, then rehearses
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_read"):
                        break
                await asyncio.sleep(0.001)


async def burst(mode: str, slots: int, paths: list[Path], jobs: int) -> list[tuple[Path, float]]:
    """`slots` workers taking `jobs` jobs back to back: (file, seconds) for each."""
    queue, found = [paths[i % len(paths)] for i in range(jobs)], []

    async def worker() -> None:
        while queue:
            path = queue.pop()
            found.append((path, await job(mode, path)))

    await asyncio.gather(*(worker() for _ in range(slots)))
    return found


def rss(pid: int | str) -> float:
    """MiB: a process's resident set."""
    with open(f"/proc/{pid}/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith("VmRSS:")) / 1024


def pss(pid: int) -> float:
    """MiB: a process's proportional set (each shared page split among its sharers)."""
    with open(f"/proc/{pid}/smaps_rollup") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith("Pss:")) / 1024


def cell(values: list[float] | None, p95: bool) -> str:
    """A ratio's median, and its p95 in parentheses; "-" for a measure not taken."""
    if not values:
        return "-"
    median = f"{statistics.median(values):.2f}"
    return f"{median} ({percentile(values, 0.95):.2f})" if p95 else median


def documents(corpus: Path, scratch: Path) -> tuple[list[Path], Path]:
    """The small files and the big one: the corpus', or the built-in ones."""
    if (corpus / "files.json").exists():
        entries = json.loads((corpus / "files.json").read_text())["data"]
        paths = [corpus / e["path"] for e in entries if (corpus / e["path"]).exists()]
        return [p for p in paths if p.stat().st_size <= SMALL_MAX], corpus / HEAVY
    print(f"no corpus at {corpus}: the built-in documents", file=sys.stderr)
    small, big, writer = scratch / "one-page.pdf", scratch / "100-pages.pdf", PdfWriter()
    small.write_bytes(WARM_UP_PDF)
    for _ in range(100):
        writer.append(small)
    writer.write(big)
    return [small], big


async def bench(small: list[Path], big: Path, repeat: int, burst_jobs: int) -> str:
    for path in [*small, big] * 2:  # in-process pypdf warmed up (lazy imports, caches)
        timed(path)
    base = {p: statistics.median(timed(p) for _ in range(5)) for p in [*small, big]}
    for source, _ in MODES.values():  # every template started (a job before: cold)
        while source is not None and source.enabled and source.pid() is None:
            source.prewarm()
            await asyncio.sleep(0.01)
    for mode in MODES:  # every path taken once
        await job(mode, small[0])
    single: dict[tuple[str, str], list[float]] = {}
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}  # small files
    for path in small * repeat + [big] * 2:
        kind = "big" if path == big else "small"
        for mode in BURST_MODES if path == big else MODES:
            await settle(mode)
            took = await job(mode, path)
            single.setdefault((mode, kind), []).append(took / base[path])
            if path != big:
                seconds[mode].append(took)
    print("  single jobs: done", file=sys.stderr, flush=True)
    bursts: dict[tuple[str, str], list[float]] = {}
    for slots in SLOTS:
        for name, files, rounds in (("small", small, 2), ("big", [big], 1)):
            jobs = burst_jobs // 2 if name == "small" else slots
            for _ in range(rounds):
                for mode in BURST_MODES:
                    for path, took in await burst(mode, slots, files, jobs):
                        bursts.setdefault((mode, f"{name} x{slots}"), []).append(took / base[path])
        print(f"  bursts SLOTS={slots}: done", file=sys.stderr, flush=True)
    ready = MODES["forked, ready child"][0]
    assert ready is not None
    await settle("forked, ready child")
    template_pid, *ready_pids = ready.idle_pids()
    columns = ["small", "big", *(f"{n} x{s}" for s in SLOTS for n in ("small", "big"))]
    lines = [
        "| ratio to in-process pypdf, per job: median (p95) | single, small | single, big "
        + " ".join(f"| SLOTS={s}, {n}" for s in SLOTS for n in ("small", "big"))
        + " | single, small: ms |",
        "|---" + "|---:" * (len(columns) + 1) + "|",
    ]
    for mode in MODES:
        cells = [
            cell((single if i < 2 else bursts).get((mode, c)), i >= 2)
            for i, c in enumerate(columns)
        ]
        ms = statistics.median(seconds[mode]) * 1000
        lines.append(f"| {mode} | " + " | ".join(cells) + f" | {ms:.1f} |")
    ms = {mode: statistics.median(values) * 1000 for mode, values in seconds.items()}
    cost = ", ".join(
        f"{mode} {ms[mode] - ms[f'{mode}, sandbox off']:+.2f} ms"
        for mode in ("forked, ready child", "forked on request", "cold")
    )
    starts = {mode: s.status() for mode, (s, _) in MODES.items() if s is not None and s.enabled}
    went_cold = sum(status.cold for status in starts.values())
    return "\n".join(
        [
            *lines,
            "",
            f"Small files: {len(small)} (in-process median "
            f"{statistics.median(base[p] for p in small) * 1000:.1f} ms), big: {big.name} "
            f"({base[big] * 1000:.0f} ms); {repeat} single runs per small file and mode, "
            f"bursts of {burst_jobs} small jobs and of SLOTS big ones.",
            f"The sandbox's cost, single job on the small files (median, on - off): {cost}.",
            f"Memory: the template RSS {rss(template_pid):.0f} MiB, PSS {pss(template_pid):.0f} "
            f"MiB (at rest, the only process kept); its ready children now: {len(ready_pids)}, "
            f"PSS {sum(map(pss, ready_pids)):.0f} MiB in all; this process (pypdf in process): "
            f"RSS {rss('self'):.0f} MiB.",
            f"Forked modes' jobs that went cold (no template): {went_cold}.",
        ]
    )


def main() -> None:
    args, repeat, burst_jobs = sys.argv[1:], 6, 40
    for flag in ("--repeat", "--burst"):
        if flag in args:
            value = int(args.pop(args.index(flag) + 1))
            args.remove(flag)
            repeat, burst_jobs = (value, burst_jobs) if flag == "--repeat" else (repeat, value)
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # as quiet as in the child
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        small, big = documents(Path(args[0]) if args else DEFAULT_CORPUS, Path(scratch))
        try:
            print(asyncio.run(bench(small, big, repeat, burst_jobs)))
        finally:
            for source, _ in MODES.values():
                if source is not None:
                    source.shutdown()
    print(f"{time.perf_counter() - started:.0f} s; {machine()}.")


if __name__ == "__main__":
    main()
