"""Extraction cost, side by side in one run: in-process pypdf, the former warm spare, the template
forking on demand, and the template with ready children.

    .venv/bin/python benchmarks/bench_extract.py [CORPUS_DIR] [--repeat N] [--burst N]
    .venv/bin/python benchmarks/bench_extract.py --sandbox-only   # the sandbox's cost alone
    .venv/bin/python benchmarks/bench_extract.py CORPUS --targets  # issue 24's ratios alone

- **targets** (``--targets``, issue 24): on the small files, in one run, modes alternating:
  single jobs in process and through a ready child; two jobs at a time through the pool's
  children (SLOTS=2); and, for the physical limit on this machine, two in-process *processes*
  running the same files at the same time, the same two forking a bare child per job, and one
  of them forking a child per job alone. Every time is divided by the in-process single-job
  median of its file (those in-process jobs, interleaved with the rest), and the ratios are
  printed against the issue's targets (single 1.15x, two at a time 1.3x median, 1.6x p95).
  Also the CPU a forked job takes (the fork's, the child's, its exit's) against the same job
  in process, and each pair's total time over the jobs' total in-process time: two at a time
  on two CPUs, the total time cannot be below the CPU the jobs need (docs/performance.md).

- **single**: one job at a time, per file, N runs per mode; before each run the mode's idle
  process is ready (a spare, or the template; for "ready", a ready child done rehearsing and
  waiting on its job pipe) and no spare is starting up beside it, as on a quiet server.
- **burst SLOTS=2 / SLOTS=4**: SLOTS workers take jobs back to back (what the pool does under
  load) until at least `--burst` jobs (40) have run, over the corpus' small files, then over
  the 117-page file; every job's latency is divided by the in-process time of its file.
- **RSS at rest**: the resident set of the idle process each design keeps (a spare, or the
  template), once settled; for "ready", also with its ready children (between jobs).

Modes alternate run by run (single) and burst by burst, so that noise from other processes
hits them alike. "spare" is the design before the template (one spare child, warmed up,
replaced in the background once taken), rebuilt here from the cold child's own parts.
"template" is the template with no ready children (every job's child forked on request, as
first committed); "ready" the template keeping ready children (forked, warmed up, waiting:
the current design). "bare" is "ready" with the children's sandbox off (no Landlock, seccomp,
namespaces, no-new-privs or not-dumpable): "ready" against "bare" is what the sandbox costs a
forked job, in milliseconds too; cold children are timed with and without it as well. In
process, bursts run in SLOTS threads (the GIL lets one parse at a time): that column shows
what the same burst costs without children.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*

from pypdf import PdfReader

from benchmarks.loadkit import verdict
from django_pdfpool import extract
from django_pdfpool.exceptions import ExtractionError
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox.child_process import Child, Handle, drop, start_thread
from django_pdfpool.sandbox.engines import WARM_UP_PDF
from django_pdfpool.sandbox.template import Template
from django_pdfpool.sandbox.wire import SANDBOX_OFF

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"timeout": 60.0, "memory_limit": 1 << 30}
BIG = "009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"  # the 117-page file
SMALL_MAX = 200_000  # bytes: the corpus' small files
MODES = ("in", "spare", "template", "ready", "bare")
COLD_RUNS = 10  # cold jobs per sandbox setting, alternating


class Spares:
    """The former design: one warmed-up spare child; a job takes it (or starts a cold child
    if none is ready) and a replacement starts in the background (in one long-lived thread:
    children die with the thread that started them)."""

    def __init__(self) -> None:
        self._ready: list[Child] = []
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._building = False
        threading.Thread(target=self._keep_one, daemon=True).start()

    def child(self, engine: str, warm: bool = True) -> Handle:
        with self._lock:
            found = self._ready.pop() if self._ready else None
        self.refill()
        return found if found is not None else Child(sys.executable)

    def refill(self) -> None:
        self._wanted.set()

    def starting(self) -> bool:
        """Whether a replacement spare was asked for or is starting up."""
        return self._wanted.is_set() or self._building

    def _keep_one(self) -> None:
        while True:
            self._wanted.wait()
            self._building = True  # before the event is cleared: starting() never misses it
            self._wanted.clear()
            with self._lock:
                if self._ready:
                    self._building = False
                    continue
            child = Child(sys.executable, warm_up=True)
            if child.wait_ready(30):
                with self._lock:
                    self._ready.append(child)
            else:
                drop(child)
            self._building = False

    def pid(self) -> int | None:
        with self._lock:
            return self._ready[0].pid if self._ready else None

    def shutdown(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for child in ready:
            drop(child)


def in_process(path: Path) -> None:
    """What a naive view would do: pypdf in the server's own process."""
    reader = PdfReader(io.BytesIO(path.read_bytes()))
    [page.extract_text() for page in reader.pages]
    _ = reader.metadata


def timed(path: Path) -> float:
    start = time.perf_counter()
    with contextlib.suppress(Exception):  # encrypted or damaged: the failure is timed
        in_process(path)
    return time.perf_counter() - start


async def child_job(path: Path) -> float:
    start = time.perf_counter()
    with contextlib.suppress(ExtractionError):
        await extract(path, **LIMITS)
    return time.perf_counter() - start


class Bench:
    """The four modes, switched by swapping the sandbox's child source."""

    def __init__(self) -> None:
        on_demand = Template()
        on_demand.max_ready = 0
        bare, on_demand_bare = Template(), Template()
        bare.sandbox = on_demand_bare.sandbox = SANDBOX_OFF
        on_demand_bare.max_ready = 0
        self.sources: dict[str, Any] = {
            "spare": Spares(),
            "template": on_demand,
            "ready": Template(),
            "bare": bare,
            "template, bare": on_demand_bare,  # for sandbox_pairs only
        }

    async def use(self, mode: str, single: bool = False) -> None:
        """Make `mode` the sandbox's source of children and wait until it is settled."""
        if mode == "in":
            return
        source = self.sources[mode]
        sandbox._template = source
        if mode == "spare":
            source.refill()
        else:
            source.prewarm()
        while source.pid() is None:
            await asyncio.sleep(0.005)
        if mode in ("ready", "bare") and single:  # a ready child waits, as after a job
            if len(source.idle_pids()) < 2:  # none (they leave after 5 s idle): have one made
                with contextlib.suppress(ExtractionError):
                    await extract(WARM_UP_PDF, **LIMITS)
            while len(source.idle_pids()) < 2:
                await asyncio.sleep(0.005)
            await waiting_for_job(source.idle_pids()[1])

    async def single(self, mode: str, path: Path) -> float:
        await self.use(mode, single=True)
        spares = self.sources["spare"]  # its replacement, once started, is not to run beside
        while spares.pid() is None and spares.starting():
            await asyncio.sleep(0.005)
        return timed(path) if mode == "in" else await child_job(path)

    async def burst(self, mode: str, slots: int, paths: list[Path], jobs: int) -> list[tuple]:
        """`slots` workers, jobs back to back: (file, seconds) for each of `jobs` jobs."""
        await self.use(mode)
        queue = [paths[i % len(paths)] for i in range(jobs)]
        results: list[tuple] = []

        async def worker() -> None:
            while queue:
                path = queue.pop()
                if mode == "in":
                    seconds = await asyncio.to_thread(timed, path)
                else:
                    seconds = await child_job(path)
                results.append((path, seconds))

        await asyncio.gather(*(worker() for _ in range(slots)))
        return results

    def rss_at_rest(self, mode: str) -> int:
        return rss(self.sources[mode].pid())

    def close(self) -> None:
        for source in self.sources.values():
            source.shutdown()


async def waiting_for_job(pid: int, timeout: float = 1.0) -> None:
    """Until the ready child `pid` has rehearsed and waits on its job pipe (a ready child is
    listed from its fork on, while it still rehearses for about 4 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_read"):
                return
        await asyncio.sleep(0.001)


def rss(pid: int | None) -> int:
    """Bytes: the process's resident set (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line[:6] == "VmRSS:")


def pss(pid: int) -> int:
    """Bytes: the process's proportional set (shared pages split among their sharers)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        return next(int(line.split()[1]) * 1024 for line in rollup if line[:4] == "Pss:")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench(corpus: Path, repeat: int, burst_jobs: int) -> dict[str, Any]:
    entries = json.loads((corpus / "files.json").read_text())["data"]
    paths = [corpus / e["path"] for e in entries if (corpus / e["path"]).exists()]
    small = [p for p in paths if p.stat().st_size <= SMALL_MAX]
    big = [p for p in paths if p.name == Path(BIG).name]
    for path in paths:  # warm up in-process pypdf (lazy imports, caches)
        timed(path)
    bench = Bench()
    base = {p: statistics.median(timed(p) for _ in range(5)) for p in small + big}
    single: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    seconds_of: dict[str, list[float]] = {m: [] for m in MODES}  # small files, absolute
    for path in small + big:
        for _ in range(repeat if path in small else max(2, repeat // 3)):
            for mode in MODES:
                seconds = await bench.single(mode, path)
                single[mode].setdefault(path.name, []).append(seconds / base[path])
                if path in small:
                    seconds_of[mode].append(seconds)
    print("  single: done", file=sys.stderr, flush=True)
    bursts: dict[tuple, dict[str, list[float]]] = {}
    for name, files, jobs in (("small", small, burst_jobs), ("117 pages", big, 8)):
        for slots in (2, 4):
            ratios: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(2):  # two rounds, modes alternating
                for mode in MODES:
                    for path, seconds in await bench.burst(mode, slots, files, jobs // 2):
                        ratios[mode].append(seconds / base[path])
            bursts[(name, slots)] = ratios
            print(f"  burst {name} x{slots}: done", file=sys.stderr, flush=True)
    cold: dict[str, list[float]] = {"sandboxed": [], "bare": []}
    for _ in range(COLD_RUNS):  # a new interpreter per job, with its layers and without
        for name, level in (("sandboxed", "none"), ("bare", SANDBOX_OFF)):
            bench.sources["ready"].sandbox = level  # cold children take the source's level
            sandbox._template = bench.sources["ready"]
            start = time.perf_counter()
            with contextlib.suppress(ExtractionError):
                await extract(small[0], warm=False, **LIMITS)
            cold[name].append(time.perf_counter() - start)
    bench.sources["ready"].sandbox = "none"
    print("  cold: done", file=sys.stderr, flush=True)
    rss = {}
    for mode in ("spare", "template", "ready"):
        await bench.use(mode)
        await asyncio.sleep(0.5)
        rss[mode] = bench.rss_at_rest(mode)
    ready = bench.sources["ready"]
    await bench.single("ready", small[0])
    await asyncio.sleep(0.5)  # one ready child after a job
    busy = [pss(pid) for pid in ready.idle_pids()]
    while len(ready.idle_pids()) > 1:  # its ready children gone
        await asyncio.sleep(0.1)
    rss["ready, at rest"] = pss(ready.pid())
    rss["ready, between jobs"] = sum(busy)
    starts = {m: bench.sources[m].status() for m in ("template", "ready")}
    pairs = await sandbox_pairs(bench)
    bench.close()
    return {
        "pairs": pairs,
        "confine": await asyncio.to_thread(confine_times),
        "seconds": seconds_of,
        "cold": cold,
        "single": single,
        "bursts": bursts,
        "rss": rss,
        "base": base,
        "small": small,
        "starts": starts,
    }


def table(found: dict[str, Any]) -> str:
    lines = [
        "| measure (ratio to in-process pypdf, per job) | in-process | spare | template | ready "
        "| ready, no sandbox |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def row(label: str, by_mode: dict[str, list[float]], stat: str) -> None:
        cells = []
        for mode in MODES:
            values = by_mode[mode]
            cells.append(
                f"{statistics.median(values) if stat == 'median' else pct(values, 0.95):.2f}"
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    single = found["single"]
    small_names = {p.name for p in found["small"]}
    for label, names in (
        ("small files", small_names),
        ("117 pages", set(single["in"]) - small_names),
    ):
        pooled = {m: [r for n in names for r in single[m][n]] for m in MODES}
        row(f"single job, {label}: median", pooled, "median")
    for (name, slots), ratios in found["bursts"].items():
        row(f"burst SLOTS={slots}, {name}: median", ratios, "median")
        row(f"burst SLOTS={slots}, {name}: p95", ratios, "p95")
    base = found["base"]
    small_ms = statistics.median(base[p] for p in found["small"]) * 1000
    mb = {m: value / 2**20 for m, value in found["rss"].items()}
    return (
        "\n".join(lines)
        + f"\n\nIn-process median over the {len(found['small'])} small files: {small_ms:.1f} ms. "
        + f"RSS at rest: spare {mb['spare']:.0f} MiB, template {mb['template']:.0f} MiB, "
        + f"ready {mb['ready']:.0f} MiB (the one idle process of each design); "
        + f"PSS of ready's template at rest {mb['ready, at rest']:.0f} MiB, "
        + f"of it and its one ready child between jobs {mb['ready, between jobs']:.0f} MiB.\n"
        + f"Children: {found['starts']}.\n"
        + sandbox_cost(found)
        + "\n"
        + sandbox_table(found["pairs"], found["confine"])
    )


def sandbox_cost(found: dict[str, Any]) -> str:
    """What the sandbox adds to a job, in milliseconds: forked (ready against bare, single
    jobs on the small files) and cold (a new interpreter with its layers and without)."""
    seconds, cold = found["seconds"], found["cold"]
    ready, bare = (statistics.median(seconds[m]) * 1000 for m in ("ready", "bare"))
    with_, without = (statistics.median(cold[m]) * 1000 for m in ("sandboxed", "bare"))
    return (
        f"Sandbox, forked job (single, small files, median): {ready:.2f} ms sandboxed, "
        f"{bare:.2f} ms without: {ready - bare:+.2f} ms. Cold job: {with_:.0f} ms sandboxed, "
        f"{without:.0f} ms without: {with_ - without:+.0f} ms ({len(cold['bare'])} each)."
    )


CONFINE_PROBE = """
import os, sys, time
from django_pdfpool.sandbox import confine
path = sys.argv[2]  # a staged upload's place
confine.confine_process()
times = []
for _ in range(int(sys.argv[1])):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # as a job's child: its own domain and filter, timed
        start = time.perf_counter()
        confine.prepare_job()
        confine.confine_job(path)
        os.write(write, repr(time.perf_counter() - start).encode())
        os._exit(0)
    os.close(write)
    times.append(float(os.read(read, 64)))
    os.close(read)
    os.waitpid(pid, 0)
print(" ".join(map(repr, times)))
"""
PAIRS = 100  # trivial forked jobs per setting, alternating


async def sandbox_pairs(bench: Bench) -> dict[str, list[float]]:
    """The built-in one-page document through a ready child, and through a child forked on
    request (no ready child), sandboxed and bare by turns."""
    found: dict[str, list[float]] = {"ready": [], "bare": [], "template": [], "template, bare": []}
    for _ in range(PAIRS):
        for mode in found:
            await bench.use(mode, single=True)
            await settled(bench)  # no ready child of another source rehearsing beside it
            start = time.perf_counter()
            await extract(WARM_UP_PDF, **LIMITS)
            found[mode].append(time.perf_counter() - start)
    return found


async def settled(bench: Bench) -> None:
    """Until every ready child of every template is done rehearsing (one forked after the
    previous job would otherwise run beside the next, on another source's bill)."""
    for name in ("ready", "bare"):
        for pid in bench.sources[name].idle_pids()[1:]:
            await waiting_for_job(pid)


def confine_times(runs: int = 200) -> list[float]:
    """Seconds `confine_job` takes in a forked child of a confined process (its whole cost)."""
    import subprocess
    import tempfile

    from django_pdfpool.sandbox.child_process import child_env

    with tempfile.NamedTemporaryFile(suffix=".pdf") as job:  # where uploads are staged
        out = subprocess.run(
            [sys.executable, "-c", CONFINE_PROBE, str(runs), job.name],
            capture_output=True,
            text=True,
            env=child_env(),
            check=True,
        ).stdout
    return [float(value) for value in out.split()]


def sandbox_only() -> None:
    """The sandbox's cost per forked job, alone (minutes less than the whole benchmark)."""
    load = os.getloadavg()[0]

    async def run() -> dict[str, list[float]]:
        bench = Bench()
        try:
            return await sandbox_pairs(bench)
        finally:
            bench.close()

    pairs = asyncio.run(run())
    confine = confine_times()
    print(sandbox_table(pairs, confine))
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs.")


def sandbox_table(pairs: dict[str, list[float]], confine: list[float]) -> str:
    median = {m: statistics.median(pairs[m]) * 1000 for m in pairs}
    p95 = {m: pct(pairs[m], 0.95) * 1000 for m in pairs}
    inside = statistics.median(confine) * 1e6
    lines = [f"Built-in one-page document, {PAIRS} jobs each, alternating (ms):"]
    for label, on, off in (
        ("ready child", "ready", "bare"),
        ("forked on request", "template", "template, bare"),
    ):
        lines.append(
            f"  {label}: median {median[on]:.2f} sandboxed, {median[off]:.2f} without "
            f"({median[on] - median[off]:+.2f}); p95 {p95[on]:.2f} / {p95[off]:.2f} "
            f"({p95[on] - p95[off]:+.2f})."
        )
    lines.append(
        f"prepare_job() + confine_job() in a forked child of a confined process (the whole "
        f"per-job sandbox, all of it on the job's path): median {inside:.0f} us, p95 "
        f"{pct(confine, 0.95) * 1e6:.0f} us ({len(confine)} children)."
    )
    return "\n".join(lines)


TWIN = """
import gc, io, json, os, sys, time, logging
from pypdf import PdfReader
logging.getLogger("pypdf").setLevel(logging.ERROR)
def run(path):
    start, cpu = time.perf_counter(), time.process_time()
    try:
        reader = PdfReader(io.BytesIO(open(path, "rb").read()))
        [page.extract_text() for page in reader.pages]
        _ = reader.metadata
    except Exception:
        pass
    return time.perf_counter() - start, time.process_time() - cpu
def forked(path):
    # the least a child per job costs: fork from this warm process, extract, exit, reap;
    # its CPU: this process's (the fork) and the child's whole life (faults, exit included)
    start, cpu = time.perf_counter(), time.process_time()
    pid = os.fork()
    if pid == 0:
        run(path)
        os._exit(0)
    usage = os.wait4(pid, 0)[2]
    took = time.perf_counter() - start
    return took, time.process_time() - cpu + usage.ru_utime + usage.ru_stime
paths = sys.argv[1:]
for path in paths * 3:  # warmed up as the benchmark's own process is
    run(path)
gc.freeze()  # as the template does before it forks
print("ready", flush=True)
for line in sys.stdin:  # paths back to back, as a SLOTS=2 worker runs them; each in a child?
    fork, batch = json.loads(line)
    print(json.dumps([(forked if fork else run)(path) for path in batch]), flush=True)
"""


class Twins:
    """Two long-lived in-process pypdf *processes* (not threads), warmed up on the files:
    what two jobs at a time cost with no child, no pipe and no fork, on this machine."""

    def __init__(self, paths: list[Path]) -> None:
        import subprocess

        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", TWIN, *map(str, paths)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for proc in self.procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"

    def burst(self, paths: list[Path], fork: bool = False) -> list[tuple[Path, float, float]]:
        """Both processes run their half of `paths` at the same time: (file, seconds, CPU
        seconds) per job; with ``fork``, each job in a child forked for it (the floor of a
        child per job), its CPU the fork's, the child's and its exit's."""
        return self._run([paths[0::2], paths[1::2]], fork)

    def alone(self, paths: list[Path], fork: bool) -> list[tuple[Path, float, float]]:
        """One process runs `paths` back to back, the other idle: single jobs."""
        return self._run([paths], fork)

    def _run(self, shares: list[list[Path]], fork: bool) -> list[tuple[Path, float, float]]:
        procs = self.procs[: len(shares)]
        for proc, share in zip(procs, shares, strict=True):
            assert proc.stdin is not None
            proc.stdin.write(json.dumps([fork, [str(p) for p in share]]) + "\n")
            proc.stdin.flush()
        found: list[tuple[Path, float, float]] = []
        for proc, share in zip(procs, shares, strict=True):
            assert proc.stdout is not None
            times = json.loads(proc.stdout.readline())
            found.extend((path, took, cpu) for path, (took, cpu) in zip(share, times, strict=True))
        return found

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


SINGLE_TARGET, PAIR_MEDIAN_TARGET, PAIR_P95_TARGET = 1.15, 1.3, 1.6
ALONE = "single, a bare child forked per job (no pool, no sandbox)"
PAIR = "two at a time, pool's children"
PLAIN = "two at a time, in-process processes"  # the twins, no fork
FORKING = "two at a time, processes forking a child per job"  # the twins, a child per job
THREADS = "two at a time, in-process threads"


def fresh(work: Any, future: Any) -> None:
    """A job's worker thread as before issue 24's kept workers: a new one per job."""
    start_thread(threading.Thread(target=work, daemon=True, name="pdfpool-extract"), future)


async def targets_run(corpus: Path, repeat: int, burst_jobs: int) -> dict[str, Any]:
    """Issue 24's figures in one run (see the module's docstring)."""
    entries = json.loads((corpus / "files.json").read_text())["data"]
    paths = [corpus / e["path"] for e in entries if (corpus / e["path"]).exists()]
    small = [p for p in paths if p.stat().st_size <= SMALL_MAX]
    for path in small * 3:
        timed(path)
    bench, twins = Bench(), Twins(small)
    raw: dict[str, list[tuple[Path, float]]] = {}
    ratios: dict[str, list[float]] = {
        "single, in process": [],
        "single, ready child": [],
        "single, ready child, a thread per job (before)": [],
        PAIR: [],
        PLAIN: [],
        FORKING: [],
        THREADS: [],
        ALONE: [],
    }
    cpu: dict[str, list[tuple[Path, float]]] = {}  # CPU seconds per job, the twins'
    seconds: dict[str, list[float]] = {"in": [], "ready": [], "fresh": []}
    labels = {
        "in": "single, in process",
        "ready": "single, ready child",
        "fresh": "single, ready child, a thread per job (before)",
    }
    kept = sandbox._workers.run
    try:
        for _ in range(repeat):
            for path in small:
                for mode, label in labels.items():
                    sandbox._workers.run = fresh if mode == "fresh" else kept  # type: ignore[method-assign]
                    took = await bench.single("ready" if mode == "fresh" else mode, path)
                    seconds[mode].append(took)
                    raw.setdefault(label, []).append((path, took))
        sandbox._workers.run = kept  # type: ignore[method-assign]
        # apart: interleaved, these forks raised the single ready child's ratio by 0.03-0.07
        for _ in range(repeat):
            for path, took, _ in await asyncio.to_thread(twins.alone, small, True):
                raw.setdefault(ALONE, []).append((path, took))
        for _ in range(max(1, burst_jobs // len(small))):  # rounds, modes alternating
            for label, run in (
                (PAIR, bench.burst("ready", 2, small, len(small))),
                (PLAIN, asyncio.to_thread(twins.burst, small)),
                (FORKING, asyncio.to_thread(twins.burst, small, True)),
                (THREADS, bench.burst("in", 2, small, len(small))),
            ):
                for path, took, *used in await run:  # the twins' jobs also give their CPU
                    raw.setdefault(label, []).append((path, took))
                    if used:
                        cpu.setdefault(label, []).append((path, used[0]))
    finally:
        twins.close()
        bench.close()
    # The base: each file's median in-process single job, from the runs interleaved with the
    # others above (a base taken apart, in a quiet or a noisy moment, would skew every ratio).
    base = {p: statistics.median(t for q, t in raw["single, in process"] if q == p) for p in small}
    for label, found in raw.items():
        ratios[label] = [took / base[path] for path, took in found]
    # CPU: each forked job's (fork, child, exit) against its file's median in a twin, no fork
    plain, forking = cpu[PLAIN], cpu[FORKING]
    cpu_base = {p: statistics.median(c for q, c in plain if q == p) for p in small}
    forked_cpu = [c / cpu_base[p] for p, c in forking]
    extra_cpu = [c - cpu_base[p] for p, c in forking]
    weighted = {
        label: sum(t for _, t in found) / sum(base[p] for p, _ in found)
        for label, found in raw.items()
    }
    weighted_cpu = sum(c for _, c in forking) / sum(cpu_base[p] for p, _ in forking)
    return {
        "ratios": ratios,
        "seconds": seconds,
        "base": base,
        "forked_cpu": forked_cpu,
        "extra_cpu": extra_cpu,
        "weighted": weighted,
        "weighted_cpu": weighted_cpu,
    }


def targets_table(found: dict[str, Any], load: tuple[float, float]) -> str:
    ratios = found["ratios"]
    lines = [
        "| small files, ratio to in-process single job | jobs | median | p95 |",
        "|---|---:|---:|---:|",
    ]
    for label, values in ratios.items():
        median, p95 = statistics.median(values), pct(values, 0.95)
        lines.append(f"| {label} | {len(values)} | {median:.2f} | {p95:.2f} |")
    single = statistics.median(ratios["single, ready child"])
    floor = statistics.median(ratios["single, in process"])
    pair = ratios[PAIR]
    limit = ratios[PLAIN]
    forking = ratios[FORKING]
    pair_median, pair_p95 = statistics.median(pair), pct(pair, 0.95)
    cpu_floor = statistics.median(found["forked_cpu"])
    checks = [
        (
            f"single job <= {SINGLE_TARGET}x in process",
            single <= SINGLE_TARGET,
            f"{single:.2f}x (in process, interleaved the same way: {floor:.2f}x)",
        ),
        (
            f"two at a time: median <= {PAIR_MEDIAN_TARGET}x",
            pair_median <= PAIR_MEDIAN_TARGET,
            f"{pair_median:.2f}x (two in-process processes: {statistics.median(limit):.2f}x; "
            f"forking a child per job: {statistics.median(forking):.2f}x; such a job alone: "
            f"{statistics.median(ratios[ALONE]):.2f}x, its CPU {cpu_floor:.2f}x in process)",
        ),
        (
            f"two at a time: p95 <= {PAIR_P95_TARGET}x",
            pair_p95 <= PAIR_P95_TARGET,
            f"{pair_p95:.2f}x (two in-process processes: {pct(limit, 0.95):.2f}x; "
            f"forking a child per job: {pct(forking, 0.95):.2f}x; such a job alone: "
            f"{pct(ratios[ALONE], 0.95):.2f}x)",
        ),
    ]
    base_ms = statistics.median(found["base"].values()) * 1000
    ms = {m: statistics.median(v) * 1000 for m, v in found["seconds"].items()}
    lines.append(
        f"\nIn-process median of the {len(found['base'])} small files {base_ms:.1f} ms; single "
        f"jobs, median over all runs: in process {ms['in']:.2f} ms, ready child {ms['ready']:.2f} "
        f"ms ({ms['ready'] - ms['in']:+.2f} ms), with a thread per job {ms['fresh']:.2f} ms "
        f"({ms['fresh'] - ms['in']:+.2f} ms). Load average {load[0]:.2f} before, "
        f"{load[1]:.2f} after; {os.cpu_count()} CPUs."
    )
    total, extra = found["weighted"], found["extra_cpu"]
    lines.append(
        f"A job in a child forked for it takes {statistics.median(extra) * 1000:.1f} ms more CPU"
        f" than in process (median: the fork, the child's copy-on-write faults, its "
        f"exit): {cpu_floor:.2f}x per job (median), {found['weighted_cpu']:.2f}x over the "
        f"burst (its CPU over the same jobs' in process). Two at a time back to back on "
        f"{os.cpu_count()} CPUs, the jobs' total time is at least the CPU they need; total time "
        f"over total in-process time: pool's children {total[PAIR]:.2f}x, processes forking a "
        f"child per job {total[FORKING]:.2f}x, in-process processes {total[PLAIN]:.2f}x."
    )
    lines += [f"{verdict(met)} {label}: {detail}" for label, met, detail in checks]
    return "\n".join(lines)


def main() -> None:
    args = sys.argv[1:]
    if "--sandbox-only" in args:
        logging.getLogger("pypdf").setLevel(logging.ERROR)
        sandbox.configure(warm=False)
        sandbox_only()
        return
    repeat, burst_jobs = 6, 40
    if "--repeat" in args:
        repeat = int(args.pop(args.index("--repeat") + 1))
        args.remove("--repeat")
    if "--burst" in args:
        burst_jobs = int(args.pop(args.index("--burst") + 1))
        args.remove("--burst")
    only_targets = "--targets" in args
    if only_targets:
        args.remove("--targets")
    corpus = Path(args[0]) if args else ROOT.parent / "shared" / "corpus"
    if not (corpus / "files.json").exists():
        sys.exit(f"no corpus at {corpus}")
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # same quiet pypdf as in the child
    sandbox.configure(warm=False)  # the module's own template stays off: Bench swaps
    started, load = time.perf_counter(), os.getloadavg()[0]
    if only_targets:
        found = asyncio.run(targets_run(corpus, repeat, burst_jobs))
        print(targets_table(found, (load, os.getloadavg()[0])))
        print(
            f"{repeat} single runs per small file and mode; {time.perf_counter() - started:.0f} s."
        )
        return
    found = asyncio.run(bench(corpus, repeat, burst_jobs))
    print(table(found))
    print("\nIssue 24's targets (small files; the same process, right after):")
    print(
        targets_table(
            asyncio.run(targets_run(corpus, repeat, burst_jobs)), (load, os.getloadavg()[0])
        )
    )
    print(
        f"\n{repeat} single runs per small file and mode, bursts of {burst_jobs} jobs; "
        f"{time.perf_counter() - started:.0f} s in all; load average {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs."
    )


if __name__ == "__main__":
    main()
