"""The pool under load on a real server, against what a user would otherwise write.

``python benchmarks/bench_load.py [--clients 32] [--seconds 30] [--quick]`` starts the
example project (``example_project/``, ``demo.asgi:application``) under uvicorn (one worker,
a free loopback port) once per variant, with the benchmark's routes (``benchmarks/variants.py``),
and offers each the same load:

- **pdfpool**: ``/api/extract/``, the example's ``@pdf_pooled`` view, default settings
  (SLOTS 2, QUEUE 4, WAIT 10 s, a warm spare);
- **naive**: ``/bench/naive/``, the same job with no admission: a cold child per request;
- **executor**: ``/bench/executor/``, a ``ProcessPoolExecutor(max_workers=SLOTS)``: bounded
  workers, an unbounded queue, no sharing.

Load: C clients (each from its own loopback address, so each is another anonymous caller)
post back to back for T seconds; a refused upload (503, 429) is recorded and the client
goes on after a short pause (50 ms, not the full Retry-After: the offered load stays the
same for every variant). Half the uploads are *identical* (one of three corpus files, the
117-page one among them, byte for byte), half *distinct* (any corpus file with a unique
comment appended after ``%%EOF``, so no two are alike). Uploads still in flight at T are
awaited. Meanwhile a separate process polls ``/bench/health/`` every 50 ms (first for a
few seconds before the load: the idle figure) and another samples the server's process
tree with psutil every 50 ms.

Per variant: successful extractions per second (200s over the time from the start of the
load to its last answer), extraction runs performed (the server's own count), latency
p50/p95/p99 of the 200s, latency p50/p99 of refusals, status counts, the peak RSS of the
process tree (server plus every descendant, summed) and of the server alone, the largest
child's RSS, the most children alive at once (descendants, not counting multiprocessing's
resource tracker), health p99 idle and under load, and single-flight's saving on the
identical uploads: 1 - runs / answers, where runs on identical uploads are all runs less
the distinct uploads that were answered (each of those ran exactly once). It prints a table
with each variant's ratio to pdfpool and checks the issue's targets.

Needs the corpus of real PDFs in ``../shared/corpus`` (or ``--corpus``); exits with status
2 if it is missing. Everything runs on one machine: the load generator, the probes, the
server and its children share its CPUs, which the figures include.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus"
sys.path.insert(0, str(ROOT))  # tests.servers: the same uvicorn launcher the tests use

VARIANTS = {"pdfpool": "/api/extract/", "naive": "/bench/naive/", "executor": "/bench/executor/"}
SLOTS = 2  # the default; the executor gets as many workers
HEAVY = "009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
HOT = (HEAVY, "004-pdflatex-4-pages/pdflatex-4-pages.pdf", "026-latex-multicolumn/multicolumn.pdf")
IDENTICAL_SHARE = 0.5
BOUNDARY = "pdfpool-bench-boundary"
REFUSED = (429, 503)

# The targets
REFUSAL_P99_MS = 50.0
HEALTH_FACTOR = 2.0
SAVING = 0.80


# --- the corpus and the mix ---------------------------------------------------------------


def load_corpus(directory: Path) -> dict[str, bytes]:
    """Every file files.json lists, by its path there."""
    listing = json.loads((directory / "files.json").read_text())["data"]
    return {entry["path"]: (directory / entry["path"]).read_bytes() for entry in listing}


def multipart(name: str, data: bytes) -> bytes:
    """A multipart/form-data body with ``data`` as the field ``file``: built once per upload
    by plain concatenation, so the load generator spends no time encoding."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{Path(name).name}"\r\nContent-Type: application/pdf\r\n\r\n'
    ).encode()
    return head + data + f"\r\n--{BOUNDARY}--\r\n".encode()


class Mix:
    """Half identical uploads (one of HOT, unchanged), half distinct (any corpus file with a
    unique comment after %%EOF: readers ignore it, its SHA-256 is new)."""

    def __init__(self, corpus: dict[str, bytes]) -> None:
        self.corpus = corpus
        self.names = sorted(corpus)
        self.hot = {name: multipart(name, corpus[name]) for name in HOT}
        self._serial = 0

    def pick(self, rng: random.Random) -> tuple[str, str, bytes]:
        if rng.random() < IDENTICAL_SHARE:
            name = rng.choice(HOT)
            return "identical", name, self.hot[name]
        name = rng.choice(self.names)
        self._serial += 1
        nonce = f"\n%pdfpool-bench {os.getpid()}-{self._serial}\n".encode()
        return "distinct", name, multipart(name, self.corpus[name] + nonce)


# --- the probes: separate processes, so the load generator's own work does not skew them ---


def probe_health(url: str, start: float, seconds: float, interval: float) -> None:
    """Poll ``url`` every ``interval`` s from wall time ``start`` for ``seconds``; print the
    latencies (ms; None for a failure) as JSON."""
    import httpx

    latencies: list[float | None] = []
    with httpx.Client(timeout=30) as http:
        http.get(url)  # connect before the clock starts
        time.sleep(max(0.0, start - time.time()))
        due = time.monotonic()
        end = due + seconds
        while time.monotonic() < end:
            began = time.perf_counter()
            try:
                ok = http.get(url).status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append((time.perf_counter() - began) * 1000 if ok else None)
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))
    print(json.dumps(latencies))


def probe_tree(pid: int, interval: float) -> None:
    """Sample the process tree of ``pid`` every ``interval`` s until stdin closes; print the
    samples as JSON: [wall time, tree RSS, server RSS, children, largest child RSS].

    A descendant still running the server's command line is a child between fork and exec:
    its RSS is the server's own pages (subprocess uses vfork), so it is not counted."""
    import psutil

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    server = psutil.Process(pid)
    own = server.cmdline()
    samples = []
    while not stop.is_set():
        try:
            server_rss = server.memory_info().rss
            descendants = server.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        tree, children, largest = server_rss, 0, 0
        for child in descendants:
            try:
                command = child.cmdline()
                rss = child.memory_info().rss
            except psutil.Error:  # gone meanwhile
                continue
            if command == own:  # forked, not yet exec'd: the server's own pages (vfork)
                continue
            tracker = "resource_tracker" in " ".join(command)
            tree += rss
            if not tracker:
                children += 1
                largest = max(largest, rss)
        samples.append((time.time(), tree, server_rss, children, largest))
        stop.wait(interval)
    print(json.dumps(samples))


def run_probe(kind: str, *args: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--probe", kind, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


# --- the load -----------------------------------------------------------------------------


@dataclass
class Record:
    kind: str  # identical / distinct
    name: str  # the corpus file
    status: int | str  # an HTTP status, or the name of a transport error
    code: str  # the answer's error code, "" for a 200
    latency: float  # seconds


@dataclass
class Result:
    variant: str
    records: list[Record]
    wall: float  # from the start of the load to its last answer
    runs: int
    health_idle: list[float | None]
    health_load: list[float | None]
    idle: list[tuple] = field(default_factory=list)  # tree samples before the load
    load: list[tuple] = field(default_factory=list)  # ... during it
    leftovers: list[str] = field(default_factory=list)  # staged uploads left behind
    orphans: list[str] = field(default_factory=list)  # descendants alive after the server
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds during the load


async def client_loop(
    http: Any, url: str, mix: Mix, rng: random.Random, end: float, pause: float, out: list
) -> None:
    """One client: post, record, and again until ``end`` (a refusal: after ``pause``)."""
    import httpx

    headers = {
        "content-type": f"multipart/form-data; boundary={BOUNDARY}",
        "accept": "application/json",
        "x-requested-with": "bench",  # the example's API refuses POSTs without it
    }
    while time.monotonic() < end:
        kind, name, body = mix.pick(rng)
        began = time.perf_counter()
        code = ""
        try:
            response = await http.post(url, content=body, headers=headers)
            status: int | str = response.status_code
            if status != 200:
                with contextlib.suppress(ValueError):
                    code = response.json().get("error", "")
        except httpx.HTTPError as error:
            status = type(error).__name__
        out.append(Record(kind, name, status, code, time.perf_counter() - began))
        if status in REFUSED:
            await asyncio.sleep(pause)


async def offer_load(url: str, mix: Mix, clients: int, start: float, seconds: float, pause: float):
    """C clients, each from its own loopback address, from wall time ``start``."""
    import httpx

    context = ssl.create_default_context()  # one for all: each costs ~15 ms to build
    records: list[Record] = []
    https = [
        httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(
                local_address=f"127.0.{100 + i // 250}.{i % 250 + 1}", verify=context
            ),
            timeout=300,
        )
        for i in range(clients)
    ]
    try:
        await asyncio.sleep(max(0.0, start - time.time()))
        began = time.monotonic()
        end = began + seconds
        await asyncio.gather(
            *(
                client_loop(http, url, mix, random.Random(i), end, pause, records)
                for i, http in enumerate(https)
            )
        )
        return records, time.monotonic() - began
    finally:
        await asyncio.gather(*(http.aclose() for http in https))


def get_json(url: str) -> dict:
    import httpx

    return httpx.get(url, timeout=30).json()


def post(url: str, name: str, data: bytes) -> int:
    import httpx

    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    headers["x-requested-with"] = "bench"  # the example's API refuses POSTs without it
    return httpx.post(url, content=multipart(name, data), headers=headers, timeout=60).status_code


def bench_variant(variant: str, corpus: dict[str, bytes], args: argparse.Namespace) -> Result:
    import psutil

    from tests.servers import uvicorn

    state = Path(tempfile.mkdtemp(prefix="pdfpool-bench-"))
    staged = state / "staged"
    staged.mkdir()
    env = dict(  # over os.environ, which has no PDFPOOL_* (main() checks)
        DJANGO_SETTINGS_MODULE="benchmarks.variants_settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        DEMO_STATE_DIR=str(state),
        DEMO_LOG_LEVEL="WARNING",
        PDFPOOL_TEMP_DIR=str(staged),  # default settings otherwise; staged here to check it
    )
    mix = Mix(corpus)
    try:
        with uvicorn("demo.asgi:application", env=env, cwd=EXAMPLE) as server:
            url = server.url + VARIANTS[variant]
            # Warm up: the pool and its spare, or the executor's workers, exist before the clock
            small = "001-trivial/minimal-document.pdf"
            for _ in range(3):
                assert post(url, small, corpus[small]) == 200
            time.sleep(1.0)
            sampler = run_probe("tree", server.pid, args.sample)
            idle_start = time.time()
            health = run_probe("health", server.url + "/bench/health/", idle_start, args.idle, 0.05)
            health_idle = json.loads(health.communicate()[0])
            before = get_json(server.url + "/bench/stats/")["runs"][variant]
            start = time.time() + 1.0
            health = run_probe("health", server.url + "/bench/health/", start, args.seconds, 0.05)
            before_cpu = CpuReading.take(psutil.Process(server.pid))
            records, wall = asyncio.run(
                offer_load(url, mix, args.clients, start, args.seconds, args.pause)
            )
            cpu = before_cpu.until(CpuReading.take(psutil.Process(server.pid)))
            health_load = json.loads(health.communicate()[0])
            runs = get_json(server.url + "/bench/stats/")["runs"][variant] - before
            samples = json.loads(sampler.communicate("")[0])
            descendants = psutil.Process(server.pid).children(recursive=True)
        leftovers = [path.name for path in staged.iterdir()]
        orphans = outlived(descendants)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return Result(
        variant,
        records,
        wall,
        runs,
        health_idle,
        health_load,
        idle=[s for s in samples if s[0] < start],
        load=[s for s in samples if s[0] >= start],
        leftovers=leftovers,
        orphans=orphans,
        cpu=cpu,
    )


@dataclass
class CpuReading:
    """CPU seconds so far: the machine's busy time, the server's own, its descendants'
    (reaped ones through the server's children times, live ones each), and this process's
    (the load generator)."""

    at: float
    machine: float
    server: float
    reaped: float
    live: dict[int, float]
    load: float

    @classmethod
    def take(cls, server: Any) -> CpuReading:
        import psutil

        machine = psutil.cpu_times()
        own = server.cpu_times()
        live = {}
        for child in server.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                times = child.cpu_times()
                live[child.pid] = times.user + times.system
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(
            at=time.monotonic(),
            machine=sum(machine) - machine.idle - machine.iowait,
            server=own.user + own.system,
            reaped=own.children_user + own.children_system,
            live=live,
            load=usage.ru_utime + usage.ru_stime,
        )

    def until(self, end: CpuReading) -> dict[str, float]:
        """CPU seconds spent from this reading to ``end``, by whom, and the seconds."""
        children = end.reaped - self.reaped + sum(end.live.values())
        children -= sum(seconds for pid, seconds in self.live.items() if pid in end.live)
        spent = {
            "server": end.server - self.server,
            "children": children,
            "load": end.load - self.load,
        }
        spent["other"] = end.machine - self.machine - sum(spent.values())
        spent["seconds"] = end.at - self.at
        return spent


def outlived(processes: list) -> list[str]:
    """Of the server's descendants, those still alive after it exited (uvicorn ends a
    SIGTERM'd process by re-raising the signal, so no atexit hook runs: an executor's
    workers, blocked on their call queue, are orphaned). They are ended here, by pid."""
    import psutil

    found = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(" ".join(process.cmdline())[:80])
                process.kill()
        except psutil.Error:
            pass
    return found


# --- the figures --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


MiB = 1 << 20


def figures(result: Result) -> dict[str, Any]:
    records = result.records
    ok = [r.latency * 1000 for r in records if r.status == 200]
    refused = [r.latency * 1000 for r in records if r.status in REFUSED]
    answered = {
        kind: sum(r.status in (200, 422) for r in records if r.kind == kind)
        for kind in ("identical", "distinct")
    }
    identical_runs = result.runs - answered["distinct"]
    saving = 1 - identical_runs / answered["identical"] if answered["identical"] else None
    health_idle = [v for v in result.health_idle if v is not None]
    health_load = [v for v in result.health_load if v is not None]
    load = result.load or [(0, 0, 0, 0, 0)]
    return {
        "requests": len(records),
        "ok_per_s": sum(r.status == 200 for r in records) / result.wall,
        "runs": result.runs,
        "ok_p50": percentile(ok, 0.50),
        "ok_p95": percentile(ok, 0.95),
        "ok_p99": percentile(ok, 0.99),
        "refusal_p50": percentile(refused, 0.50),
        "refusal_p99": percentile(refused, 0.99),
        "statuses": Counter(str(r.status) for r in records),
        "codes": Counter(r.code for r in records if r.code),
        "tree_peak": max(s[1] for s in load) / MiB,
        "server_peak": max(s[2] for s in load) / MiB,
        "server_idle": max((s[2] for s in result.idle), default=0) / MiB,
        "child_largest": max(s[4] for s in load) / MiB,
        "children_max": max(s[3] for s in load),
        "health_idle_p50": percentile(health_idle, 0.50),
        "health_idle_p99": percentile(health_idle, 0.99),
        "health_p50": percentile(health_load, 0.50),
        "health_p99": percentile(health_load, 0.99),
        "health_failed": sum(v is None for v in result.health_load),
        "identical_answered": answered["identical"],
        "identical_runs": identical_runs,
        "saving": saving,
        "wall": result.wall,
        "leftovers": len(result.leftovers),
        "orphans": len(result.orphans),
        **{
            f"cpu_{name}": seconds / result.cpu["seconds"]
            for name, seconds in result.cpu.items()
            if name != "seconds"
        },
    }


ROWS = [  # (label, key, format)
    ("uploads sent", "requests", "{:,.0f}"),
    ("seconds from the load's start to its last answer", "wall", "{:.1f}"),
    ("successful extractions /s (higher is better)", "ok_per_s", "{:.2f}"),
    ("extraction runs performed", "runs", "{:,.0f}"),
    ("latency of 200s p50 ms", "ok_p50", "{:,.0f}"),
    ("latency of 200s p95 ms", "ok_p95", "{:,.0f}"),
    ("latency of 200s p99 ms", "ok_p99", "{:,.0f}"),
    ("refusal latency p50 ms", "refusal_p50", "{:.1f}"),
    ("refusal latency p99 ms", "refusal_p99", "{:.1f}"),
    ("peak RSS, whole tree MiB", "tree_peak", "{:,.0f}"),
    ("peak RSS, server alone MiB", "server_peak", "{:,.0f}"),
    ("largest child RSS MiB", "child_largest", "{:,.0f}"),
    ("most children alive at once", "children_max", "{:,.0f}"),
    ("health p50 ms, idle", "health_idle_p50", "{:.1f}"),
    ("health p99 ms, idle", "health_idle_p99", "{:.1f}"),
    ("health p50 ms, under load", "health_p50", "{:.1f}"),
    ("health p99 ms, under load", "health_p99", "{:.1f}"),
    ("health polls failed under load", "health_failed", "{:,.0f}"),
    ("identical uploads answered", "identical_answered", "{:,.0f}"),
    ("runs for identical uploads", "identical_runs", "{:,.0f}"),
    ("single-flight saving on identical uploads", "saving", "{:.0%}"),
    ("CPUs used: the server process", "cpu_server", "{:.2f}"),
    ("CPUs used: its children (extraction, workers)", "cpu_children", "{:.2f}"),
    ("CPUs used: the load generator", "cpu_load", "{:.2f}"),
    ("CPUs used: everything else on the machine", "cpu_other", "{:.2f}"),
]


def cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    others = [name for name in names if name != "pdfpool"] if "pdfpool" in names else []
    head = ["metric", *names, *(f"{name} / pdfpool" for name in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    for label, key, fmt in ROWS:
        row = [label, *(cell(results[name][key], fmt) for name in names)]
        for name in others:
            base, value = results["pdfpool"][key], results[name][key]
            ratio = value / base if isinstance(value, (int, float)) and base else None
            row.append(cell(ratio, "{:.2f}x"))
        lines.append("| " + " | ".join(row) + " |")
    statuses = sorted({status for result in results.values() for status in result["statuses"]})
    for status in statuses:
        row = [f"answers {status}", *(f"{results[n]['statuses'].get(status, 0):,}" for n in names)]
        lines.append("| " + " | ".join(row + [""] * len(others)) + " |")
    return "\n".join(lines)


def targets(results: dict[str, dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """The issue's "done when" for the benchmark: (target, met, the figures)."""
    pool = results.get("pdfpool")
    if pool is None:
        return []
    found = []
    bound = SLOTS * pool["child_largest"] + pool["server_peak"]
    found.append(
        (
            "pdfpool's peak tree RSS <= SLOTS x the largest child + the server",
            pool["tree_peak"] <= bound,
            f"{pool['tree_peak']:.0f} MiB vs {SLOTS} x {pool['child_largest']:.0f} + "
            f"{pool['server_peak']:.0f} = {bound:.0f} MiB",
        )
    )
    if "naive" in results:
        naive = results["naive"]["tree_peak"]
        found.append(
            (
                "pdfpool's peak tree RSS below naive's",
                pool["tree_peak"] < naive,
                f"{pool['tree_peak']:.0f} MiB vs {naive:.0f} MiB",
            )
        )
    p99 = pool["refusal_p99"]
    found.append(
        (
            f"pdfpool's refusal p99 under {REFUSAL_P99_MS:.0f} ms",
            p99 is not None and p99 < REFUSAL_P99_MS,
            "no refusals" if p99 is None else f"{p99:.1f} ms",
        )
    )
    idle, loaded = pool["health_idle_p99"], pool["health_p99"]
    found.append(
        (
            f"pdfpool's health p99 under load <= {HEALTH_FACTOR:g}x idle",
            None not in (idle, loaded) and loaded <= HEALTH_FACTOR * idle,
            f"{loaded:.1f} ms vs {HEALTH_FACTOR:g} x {idle:.1f} ms idle",
        )
    )
    saving = pool["saving"]
    found.append(
        (
            f"single-flight saves >= {SAVING:.0%} of the runs on identical uploads",
            saving is not None and saving >= SAVING,
            "-"
            if saving is None
            else f"{saving:.0%} ({pool['identical_runs']} runs for "
            f"{pool['identical_answered']} answers)",
        )
    )
    return found


def machine() -> str:
    load = os.getloadavg()
    return (
        f"Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (32)")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of load (30)")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle health (5)")
    parser.add_argument("--pause", type=float, default=0.05, help="after a refusal (0.05 s)")
    parser.add_argument("--sample", type=float, default=0.05, help="tree sampling (0.05 s)")
    parser.add_argument("--quick", action="store_true", help="8 clients, 5 s: a smoke run")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--probe", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        kind, *rest = args.probe
        if kind == "health":
            probe_health(rest[0], float(rest[1]), float(rest[2]), float(rest[3]))
        else:
            probe_tree(int(rest[0]), float(rest[1]))
        return 0
    if args.quick:
        args.clients, args.seconds, args.idle = 8, 5.0, 2.0
    if not (args.corpus / "files.json").is_file():
        print(
            f"bench_load needs the corpus of real PDFs at {args.corpus} "
            "(../shared/corpus from the project root; see its README.md), or --corpus DIR",
            file=sys.stderr,
        )
        return 2
    if any(key.startswith("PDFPOOL_") for key in os.environ):
        print("unset the PDFPOOL_* variables: the example would read them", file=sys.stderr)
        return 2
    if not (EXAMPLE / "demo" / "asgi.py").is_file():
        print(f"bench_load needs the example project at {EXAMPLE}", file=sys.stderr)
        return 2
    corpus = load_corpus(args.corpus)
    command = "python benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:])
    print(f"{command.strip()}\nbefore: {machine()}", flush=True)
    results = {}
    for variant in args.variants.split(","):
        print(f"{variant}: {args.clients} clients for {args.seconds:g} s ...", flush=True)
        results[variant] = figures(bench_variant(variant, corpus, args))
        print(f"  done: {dict(results[variant]['statuses'])}", flush=True)
    print(f"after: {machine()}\n")
    print(table(results))
    errors = {n: dict(r["codes"]) for n, r in results.items() if r["codes"]}
    print(f"\nerror codes: {errors}")
    left = {n: r["leftovers"] for n, r in results.items() if r["leftovers"]}
    if left:
        print(f"staged uploads left behind: {left}")
    orphans = {n: r["orphans"] for n, r in results.items() if r["orphans"]}
    if orphans:
        print(f"processes alive after their server exited (ended by the benchmark): {orphans}")
    print()
    for target, met, detail in targets(results):
        print(f"{'MET   ' if met else 'MISSED'} {target}: {detail}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=dict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
