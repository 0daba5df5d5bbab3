"""The door under load on a real server, against the door off, in the same run.

``python benchmarks/bench_load.py [--clients 32] [--seconds 30] [--quick]`` starts the
example project (``example_project/``) under uvicorn (one worker, a free loopback port)
once per variant, with the benchmark's routes (``benchmarks/variants.py``) and a wrapper
that tells each client what the server read of its body (``benchmarks/variants_asgi.py``),
and offers each the same load on ``/api/extract/`` (``@pdf_pooled``, default settings:
SLOTS 2, QUEUE 4, WAIT 10 s, a warm spare):

- **door**: the example as it ships: ``PdfPoolDoor`` decides from the headers;
- **nodoor**: ``PDFPOOL_DOOR=0``: every body is read, parsed, staged and hashed first;
- **declared**: the door, with clients that declare each upload's digest (``Pdf-Digest``),
  so the door knows at once which uploads join and which cannot;
- optional: **nodigests** (declaring clients, the door with ``PDFPOOL_DOOR_DIGESTS=0``:
  ``PDFPOOL["DOOR"]["DIGESTS"]`` False);
  **door-noanswer**
  and **declared-noanswer**, the same on ``/bench/pooled/``, the API without its
  ``answer=json_answer`` (the door then answers on the event loop, not in a thread);
  **naive** and **executor** (no pool: see variants.py); issue 24's, each the example with
  one thing changed (see ``VARIANTS``), among them **door-newthreads** (without
  ``KeptThreads``) and **door-httptools** (uvicorn's C parser and uvloop; every other
  variant runs on h11 and asyncio, installed or not).

Clients behave as curl does with ``Expect: 100-continue`` (``benchmarks/uploader.py``):
headers first, the body only after ``100 Continue`` (or after 1 s without an answer), one
connection per upload. C clients, each from its own loopback address (another anonymous
caller), post back to back for T seconds; after a refusal (503, 429) a client waits 50 ms.
Half the uploads are identical (one of three corpus files byte for byte), half distinct
(a unique comment after ``%%EOF``). A separate process polls ``/bench/health/`` every 50 ms
(a few seconds idle first), and polls a trivial server beside (``loadkit.serve_beside``, a
process and session of its own) the same way: the machine's floor for any request under the
load. Both probes run at ``SCHED_FIFO`` where the benchmark may set it (root), so that their
own waits for a CPU, which clients of a real server do not share, stay out of its figures
(``--plain-probes``: the ordinary priority, as before session 11). Another samples the
process tree's RSS. Then, the pool idle again, a **burst**: 200 uploads from 100
addresses, connected first and sent at once, with trivial GETs (``/bench/plain/``, through
Django's middleware) sent alongside: the floor a refusal from the headers is compared with.
``--slow-body`` runs instead a slow-body load on the door: more trickling clients than places
and budget together, normal uploads alongside.

Per variant: refusal p50/p99; refusals answered before the body (the door's) and after it;
body bytes the server read for refused uploads (its own count, and what clients sent);
server CPU; health p99 idle and under load; extractions per second; then the burst's
figures. It prints a Markdown table and checks the issue's targets.

Needs the corpus (``../shared/corpus`` or ``--corpus``; exit status 2 without it). The
load generator, the probes, the server and its children share the machine's CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.servers, benchmarks.*

from benchmarks.loadkit import (
    DEFAULT_CORPUS,
    EXAMPLE,
    ROOT,
    CpuReading,
    MiB,
    Mix,
    beside,
    cell,
    load_corpus,
    machine,
    multipart,
    outlived,
    percentile,
    probes_first,
    run_probe,
    table,
    verdict,
)
from benchmarks.loadkit import HOT as HOT  # for soak.py
from benchmarks.uploader import BURST, REFUSED, Record, address, burst, offer_load, post


@dataclass(frozen=True)
class Variant:
    path: str
    env: dict[str, str]
    declare: bool = False  # clients declare each upload's digest
    runs: str = "pdfpool"  # its count in /bench/stats/
    health: str = "/bench/health/"  # the page the probe polls
    idle_children: bool = False  # the template and its children at SCHED_IDLE (inherited)
    # EEVDF's requested slice (sched_setattr's sched_runtime, Linux 6.12+), in ms, for the
    # template and its children (inherited by the children it forks later), for the server's
    # threads (inherited by threads they start); 0: the kernel's default
    children_slice: float = 0.0
    server_slice: float = 0.0


VARIANTS = {
    "door": Variant("/api/extract/", {}),
    "nodoor": Variant("/api/extract/", {"PDFPOOL_DOOR": "0"}),
    "declared": Variant("/api/extract/", {}, declare=True),
    "nodigests": Variant("/api/extract/", {"PDFPOOL_DOOR_DIGESTS": "0"}, declare=True),
    "door-noanswer": Variant("/bench/pooled/", {}),
    "declared-noanswer": Variant("/bench/pooled/", {}, declare=True),
    "door-nomiddleware": Variant("/api/extract/", {"BENCH_MIDDLEWARE": "none"}),
    "door-switch": Variant("/api/extract/", {"BENCH_SWITCH_INTERVAL": "0.0005"}),
    # the example before issue 24: Django's middleware as it ships, WhiteNoise's (sync only)
    "door-classic": Variant("/api/extract/", {"BENCH_MIDDLEWARE": "classic"}),
    # uvicorn[standard]'s C parser and uvloop (pip install 'uvicorn[standard]')
    "door-httptools": Variant(
        "/api/extract/", {"UVICORN_HTTP": "httptools", "UVICORN_LOOP": "uvloop"}
    ),
    # diagnostic: Django's database receivers of request_started/finished disconnected, so
    # the health page makes no thread hop (connections are never closed: not for a server)
    "door-nodbsignals": Variant("/api/extract/", {"BENCH_NO_DB_SIGNALS": "1"}),
    # the example without KeptThreads: a thread started and joined for each request
    "door-newthreads": Variant("/api/extract/", {"BENCH_THREADS": "new"}),
    # one extraction at a time: a CPU of the two left to the server (docs/performance.md)
    "door-slots1": Variant("/api/extract/", {"PDFPOOL_SLOTS": "1"}),
    "door-nogc": Variant("/api/extract/", {"BENCH_NO_GC": "1"}, health="/bench/raw-health/"),
    # the probe answered by the benchmark's ASGI wrapper, before Django: the server's floor
    "door-rawhealth": Variant("/api/extract/", {}, health="/bench/raw-health/"),
    # the extraction children at SCHED_IDLE: what the CPUs they take cost the server
    "door-idlechildren": Variant("/api/extract/", {}, idle_children=True),
    # the children asking for 100 ms slices, the server's threads for 0.1 ms (the kernel's
    # bounds): a waking thread of the server then preempts a child at once
    "door-longslice": Variant("/api/extract/", {}, children_slice=100.0),
    "door-shortslice": Variant("/api/extract/", {}, server_slice=0.1),
    # the children at another nice than the default (5): the example passes
    # PDFPOOL_CHILD_NICE to ``django_pdfpool.sandbox.configure(nice=...)``
    "door-nice19": Variant("/api/extract/", {"PDFPOOL_CHILD_NICE": "19"}),
    "door-nice10": Variant("/api/extract/", {"PDFPOOL_CHILD_NICE": "10"}),
    "door-nice0": Variant("/api/extract/", {"PDFPOOL_CHILD_NICE": "0"}),
    # every event-loop callback over 1 ms timed, with the collector's pauses (slowcb.py)
    "door-slowcb": Variant("/api/extract/", {"BENCH_SLOW_CALLBACKS": "slowcb.jsonl"}),
    # the API's answer streamed a chunk per page, all in one callback (before session 8)
    "door-pagechunks": Variant("/api/extract/", {"BENCH_ANSWER": "pages"}),
    # ... in 64 KiB chunks, one per turn, but built on the loop for each sharer
    "door-loopchunks": Variant("/api/extract/", {"BENCH_ANSWER": "loop"}),
    # the loop's default executor (uploads parsed, staged and hashed) with 2 threads, not 6
    "door-executor2": Variant("/api/extract/", {"BENCH_EXECUTOR": "2"}),
    # start-up's objects frozen out of the cyclic collector's passes (gc.freeze)
    "door-gcfreeze": Variant("/api/extract/", {"BENCH_GC_FREEZE": "1"}),
    "naive": Variant("/bench/naive/", {}, runs="naive"),
    "executor": Variant("/bench/executor/", {}, runs="executor"),
}
DEFAULT_VARIANTS = "door,nodoor,declared"
FAST_SERVER = ("httptools", "uvloop")  # what door-httptools runs on

# The targets
REFUSAL_P99_MS = 50.0
BURST_SHARE = 0.9  # the door serves at least this share of what the door off serves
HEALTH_UNDER_LOAD = 3.0  # issue 24: health p99 under load at most this times idle
FLOOR_GETS, FLOOR_EVERY, FLOOR_ROUNDS = 10, 0.05, 40  # GETs alongside the burst


def get_json(url: str) -> Any:
    import httpx

    return httpx.get(url, timeout=30).json()


lags: dict[str, dict[str, Any]] = {}  # --lagwatch: by variant


def lag_figures(folder: Path, name: str, start: float, ended: float) -> dict[str, Any]:
    """Lateness of the 1 ms sleeps during the load, in the server and beside it."""
    found: dict[str, Any] = {}
    for where in ("server", "outside"):
        values: list[float] = []
        slow = 0
        with contextlib.suppress(FileNotFoundError):
            for line in (folder / f"{name}-{where}.jsonl").read_text().splitlines():
                record = json.loads(line)
                if start <= record["t"] <= ended + 2:
                    values += record.get("lags", [])
                    slow += "lag_ms" in record
        found[where] = {
            "p50": round(percentile(values, 0.5) or 0, 2),
            "p99": round(percentile(values, 0.99) or 0, 2),
            "max": round(max(values, default=0), 2),
            "over_10ms": sum(v >= 10 for v in values),
            "wakeups": len(values),
        }
    return found


def idle_children(pid: int) -> None:
    """SCHED_IDLE for the server's descendants (the template and its ready children): the
    children it forks later inherit it."""
    import psutil

    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError):
            os.sched_setscheduler(child.pid, os.SCHED_IDLE, os.sched_param(0))


SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}  # sched_setattr(2)'s system call number


def set_slice(pid: int, ms: float, *, tasks: bool = False) -> None:
    """Ask for `ms`-long EEVDF slices for `pid` (every thread of it with ``tasks``), each at
    its nice value; needs Linux 6.12+ (sched_setattr's sched_runtime for SCHED_OTHER)."""
    import ctypes
    import platform
    import struct

    number = SCHED_SETATTR.get(platform.machine())
    if number is None:
        sys.exit(f"sched_setattr: no system call number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")] if tasks else [pid]
    for tid in tids:  # struct sched_attr, its first version (48 bytes)
        nice = os.getpriority(os.PRIO_PROCESS, tid)
        attr = struct.pack("=IIQiIQQQ", 48, 0, 0, nice, 0, int(ms * 1e6), 0, 0)
        if libc.syscall(number, tid, ctypes.create_string_buffer(attr), 0) != 0:
            raise OSError(ctypes.get_errno(), f"sched_setattr({tid})")


def until_idle(base: str, timeout: float = 120.0) -> None:
    """Wait until the pool has no job in flight (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while get_json(base + "/bench/stats/")["busy"] and time.monotonic() < deadline:
        time.sleep(0.2)


@dataclass
class Result:
    records: list[Record]
    wall: float  # from the start of the load to its last answer
    runs: int
    health_idle: list[float | None]
    health_load: list[float | None]
    cpu: dict[str, float]  # CPU seconds during the load
    burst: list[Record]
    burst_wall: float
    burst_cpu: dict[str, float]
    floor: list[float] = field(default_factory=list)  # ms of trivial GETs during the burst
    beside_idle: list[float | None] = field(default_factory=list)  # the trivial server beside
    beside_load: list[float | None] = field(default_factory=list)
    load: list[Any] = field(default_factory=list)  # tree samples during the load
    leftovers: list[str] = field(default_factory=list)  # staged uploads left behind
    orphans: list[str] = field(default_factory=list)  # descendants alive after the server


def bench_variant(
    name: str, variant: Variant, corpus: dict[str, bytes], args: argparse.Namespace
) -> Result:
    import psutil  # type: ignore[import-untyped]

    from tests.support.servers import uvicorn

    state = Path(tempfile.mkdtemp(prefix="pdfpool-bench-"))
    (staged := state / "staged").mkdir()
    env = dict(  # over os.environ, which has no PDFPOOL_* (main() checks)
        DJANGO_SETTINGS_MODULE="benchmarks.variants_settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        DEMO_STATE_DIR=str(state),
        DEMO_LOG_LEVEL="WARNING",
        # the example's FILE_UPLOAD_TEMP_DIR: default settings otherwise; staged here to check it
        PDFPOOL_TEMP_DIR=str(staged),
        # uvicorn's pure-Python parser and asyncio's loop, installed or not (comparable
        # figures); ``door-httptools`` overrides both
        UVICORN_HTTP="h11",
        UVICORN_LOOP="asyncio",
    )
    env.update(variant.env)
    if slow := env.get("BENCH_SLOW_CALLBACKS"):  # in the folder the benchmark runs in
        env["BENCH_SLOW_CALLBACKS"] = str(Path(slow).resolve())
        print(f"{name}: slow callbacks in {Path(slow).resolve()}", file=sys.stderr)
    if args.lagwatch:
        env["BENCH_LAGWATCH"] = str(args.lagwatch / f"{name}-server.jsonl")
    mix, declare = Mix(corpus), variant.declare
    trivial, trivial_url = beside()
    try:
        with uvicorn("benchmarks.variants_asgi:application", env=env, cwd=EXAMPLE) as server:
            url, health_url = server.url + variant.path, server.url + variant.health
            small = multipart("warm.pdf", corpus["001-trivial/minimal-document.pdf"])
            for _ in range(3):  # the pool and its spare, or the workers, exist before the clock
                assert asyncio.run(post(url, "warm", small, declare)).status == 200
            time.sleep(1.0)
            if variant.idle_children:
                idle_children(server.pid)
            if variant.children_slice:
                for child in psutil.Process(server.pid).children(recursive=True):
                    with contextlib.suppress(OSError):  # a ready child may have left
                        set_slice(child.pid, variant.children_slice)
            if variant.server_slice:
                set_slice(server.pid, variant.server_slice, tasks=True)
            sampler = run_probe("tree", server.pid, args.sample)
            health = run_probe("health", health_url, time.time(), args.idle, 0.05, fifo=args.fifo)
            floor_probe = run_probe(
                "health", trivial_url, time.time(), args.idle, 0.05, fifo=args.fifo
            )
            health_idle = json.loads(health.communicate()[0])
            beside_idle = json.loads(floor_probe.communicate()[0])
            before = get_json(server.url + "/bench/stats/")["runs"][variant.runs]
            start = time.time() + 1.0
            health = run_probe("health", health_url, start, args.seconds, 0.05, fifo=args.fifo)
            floor_probe = run_probe(
                "health", trivial_url, start, args.seconds, 0.05, fifo=args.fifo
            )
            if args.lagwatch:  # the same watcher beside the server: the machine's share
                outside = args.lagwatch / f"{name}-outside.jsonl"
                watcher = subprocess.Popen(
                    [
                        sys.executable,
                        str(ROOT / "benchmarks" / "lagwatch.py"),
                        str(outside),
                        str(args.seconds + 1),
                    ]
                )
            before_cpu = CpuReading.take(server.pid)
            records, wall = asyncio.run(
                offer_load(url, mix, args.clients, start, args.seconds, args.pause, declare)
            )
            cpu = before_cpu.until(CpuReading.take(server.pid))
            ended = time.time()
            health_load = json.loads(health.communicate()[0])
            beside_load = json.loads(floor_probe.communicate()[0])
            if args.lagwatch:
                watcher.wait()
                lags[name] = lag_figures(args.lagwatch, name, start, ended)
            runs = get_json(server.url + "/bench/stats/")["runs"][variant.runs] - before
            samples = json.loads(sampler.communicate("")[0])
            burst_records: list[Record] = []
            burst_wall, burst_cpu, floor = 0.0, {"seconds": 0.0}, []
            if variant.runs == "pdfpool":  # not naive's 200 children at once
                until_idle(server.url)
                before_cpu = CpuReading.take(server.pid)
                burst_records, burst_wall, floor = asyncio.run(
                    burst_with_floor(url, server.url + "/bench/plain/", mix, declare)
                )
                burst_cpu = before_cpu.until(CpuReading.take(server.pid))
                until_idle(server.url)
            descendants = psutil.Process(server.pid).children(recursive=True)
        leftovers = [path.name for path in staged.iterdir()]
        orphans = outlived(descendants)
    finally:
        trivial.communicate("")
        shutil.rmtree(state, ignore_errors=True)
    load = [s for s in samples if start <= s[0] <= ended]
    found = (records, wall, runs, health_idle, health_load, cpu, burst_records, burst_wall)
    return Result(
        *found,
        burst_cpu,
        floor=floor,
        beside_idle=beside_idle,
        beside_load=beside_load,
        load=load,
        leftovers=leftovers,
        orphans=orphans,
    )


async def get_ms(url: str, local: str) -> float:
    """One GET on a new connection, as the burst's clients make theirs: ms to its answer."""
    parts = urlsplit(url)
    began = time.monotonic()
    reader, writer = await asyncio.open_connection(
        parts.hostname, parts.port, local_addr=(local, 0)
    )
    writer.write(f"GET {parts.path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    await reader.read()
    writer.close()
    return (time.monotonic() - began) * 1000


async def burst_with_floor(
    url: str, plain: str, mix: Mix, declare: bool
) -> tuple[list[Record], float, list[float]]:
    """The burst, and trivial GETs through Django's middleware sent while it is answered."""

    async def floor() -> list[float]:
        found: list[float] = []
        for round_ in range(FLOOR_ROUNDS):
            found += await asyncio.gather(
                *(get_ms(plain, address(round_ * FLOOR_GETS + i, 40)) for i in range(FLOOR_GETS))
            )
            await asyncio.sleep(FLOOR_EVERY)
        return found

    (records, wall), gets = await asyncio.gather(burst(url, mix, declare), floor())
    return records, wall, gets


# --- the figures --------------------------------------------------------------------------


def refusals(records: list[Record], prefix: str = "") -> dict[str, Any]:
    """Refusal latency, before or after the body, and the body bytes read for them."""
    refused = [r for r in records if r.status in REFUSED]
    early = [r for r in refused if r.before_body]
    known = all(r.read is not None for r in refused)
    return {
        f"{prefix}refused": len(refused),
        f"{prefix}refusal_p50": percentile([r.latency * 1000 for r in refused], 0.50),
        f"{prefix}refusal_p99": percentile([r.latency * 1000 for r in refused], 0.99),
        f"{prefix}app_p99": percentile([r.app_ms for r in refused if r.app_ms is not None], 0.99),
        f"{prefix}connect_p99": percentile([r.connect_ms for r in refused], 0.99),
        f"{prefix}early": len(early),
        f"{prefix}late": len(refused) - len(early),
        f"{prefix}early_sent": sum(r.sent for r in early),
        f"{prefix}read_mib": sum(r.read or 0 for r in refused) / MiB if known else None,
        f"{prefix}sent_mib": sum(r.sent for r in refused) / MiB,
        f"{prefix}statuses": Counter(str(r.status) for r in records),
    }


def cpus(spent: dict[str, float], prefix: str = "cpu_") -> dict[str, float | None]:
    seconds = spent["seconds"]
    names = ("server", "children", "load", "other")
    return {prefix + name: spent[name] / seconds if seconds else None for name in names}


def figures(result: Result) -> dict[str, Any]:
    records = result.records
    ok = [r.latency * 1000 for r in records if r.status == 200]
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
        "ok_p99": percentile(ok, 0.99),
        **refusals(records),
        "codes": Counter(r.code for r in records if r.code),
        "tree_peak": max(s[1] for s in load) / MiB,
        "server_peak": max(s[2] for s in load) / MiB,
        "health_idle_p99": percentile(health_idle, 0.99),
        "health_p50": percentile(health_load, 0.50),
        "health_p99": percentile(health_load, 0.99),
        "health_failed": sum(v is None for v in result.health_load),
        "beside_idle_p99": percentile([v for v in result.beside_idle if v is not None], 0.99),
        "beside_p99": percentile([v for v in result.beside_load if v is not None], 0.99),
        "saving": saving,
        "leftovers": len(result.leftovers),
        "orphans": len(result.orphans),
        **cpus(result.cpu),
        **refusals(result.burst, "burst_"),
        "burst_ok": sum(r.status == 200 for r in result.burst) if result.burst else None,
        "floor_p50": percentile(result.floor, 0.50),
        "floor_p99": percentile(result.floor, 0.99),
        "burst_early_p99": percentile(
            [r.latency * 1000 for r in result.burst if r.status in REFUSED and r.before_body],
            0.99,
        ),
        "early_p99": percentile(
            [r.latency * 1000 for r in records if r.status in REFUSED and r.before_body], 0.99
        ),
        "burst_wall": result.burst_wall or None,
        **cpus(result.burst_cpu, "burst_cpu_"),
    }


ROWS = [  # (label, key, format)
    ("uploads sent", "requests", "{:,.0f}"),
    ("successful extractions /s", "ok_per_s", "{:.2f}"),
    ("extraction runs performed", "runs", "{:,.0f}"),
    ("single-flight saving on identical uploads", "saving", "{:.0%}"),
    ("latency of 200s p50 ms", "ok_p50", "{:,.0f}"),
    ("latency of 200s p99 ms", "ok_p99", "{:,.0f}"),
    ("refusals (503, 429)", "refused", "{:,.0f}"),
    ("... answered before the body (the door)", "early", "{:,.0f}"),
    ("... answered after the body (the pool)", "late", "{:,.0f}"),
    ("refusal latency p50 ms", "refusal_p50", "{:.1f}"),
    ("refusal latency p99 ms", "refusal_p99", "{:.1f}"),
    ("refusal from the headers p99 ms", "early_p99", "{:.1f}"),
    ("refusal: time in the application p99 ms", "app_p99", "{:.1f}"),
    ("refusal: time to connect p99 ms", "connect_p99", "{:.1f}"),
    ("body MiB the server read for refused uploads", "read_mib", "{:,.1f}"),
    ("body MiB clients sent for refused uploads", "sent_mib", "{:,.1f}"),
    ("body bytes sent for refusals before the body", "early_sent", "{:,.0f}"),
    ("health p99 ms, idle", "health_idle_p99", "{:.1f}"),
    ("health p50 ms, under load", "health_p50", "{:.1f}"),
    ("health p99 ms, under load", "health_p99", "{:.1f}"),
    ("a trivial server beside: p99 ms, idle", "beside_idle_p99", "{:.1f}"),
    ("a trivial server beside: p99 ms, under load (the machine's floor)", "beside_p99", "{:.1f}"),
    ("CPUs used: the server process", "cpu_server", "{:.2f}"),
    ("CPUs used: its children (extraction)", "cpu_children", "{:.2f}"),
    ("CPUs used: the load generator", "cpu_load", "{:.2f}"),
    ("CPUs used: everything else on the machine", "cpu_other", "{:.2f}"),
    ("peak RSS, whole tree MiB", "tree_peak", "{:,.0f}"),
    ("peak RSS, server alone MiB", "server_peak", "{:,.0f}"),
    (f"burst ({BURST} at once): 200s", "burst_ok", "{:,.0f}"),
    ("burst: refusals", "burst_refused", "{:,.0f}"),
    ("burst: ... answered before the body", "burst_early", "{:,.0f}"),
    ("burst: refusal latency p50 ms", "burst_refusal_p50", "{:.1f}"),
    ("burst: refusal latency p99 ms", "burst_refusal_p99", "{:.1f}"),
    ("burst: refusal from the headers p99 ms", "burst_early_p99", "{:.1f}"),
    ("burst: trivial GET alongside p50 ms (the floor)", "floor_p50", "{:.1f}"),
    ("burst: trivial GET alongside p99 ms (the floor)", "floor_p99", "{:.1f}"),
    ("burst: refusal time in the application p99 ms", "burst_app_p99", "{:.1f}"),
    ("burst: body MiB read for refused uploads", "burst_read_mib", "{:,.1f}"),
    ("burst: seconds to the last answer", "burst_wall", "{:.2f}"),
    ("burst: CPUs used by the server process", "burst_cpu_server", "{:.2f}"),
]


def statuses(results: dict[str, dict[str, Any]], key: str, label: str) -> list[str]:
    """Rows of answers by status, the ratio columns left empty."""
    found = sorted({status for result in results.values() for status in result[key]})
    blank = " |" * (len(results) - 1)
    return [
        f"| {label} {s} | "
        + " | ".join(f"{r[key].get(s, 0):,}" for r in results.values())
        + " |"
        + blank
        for s in found
    ]


def targets(
    name: str, f: dict[str, Any], off: dict[str, Any] | None
) -> list[tuple[str, bool | None, str]]:
    """The issue's figures for the benchmark: (target, met or None where the run gives
    nothing to hold to it, the figures); ``off``: the door off's figures in the same run."""
    early_p99 = f["early_p99"]
    found: list[tuple[str, bool | None, str]] = [
        (
            f"{name}: refusals from the headers p99 under {REFUSAL_P99_MS:.0f} ms",
            None if early_p99 is None else early_p99 < REFUSAL_P99_MS,
            "none from the headers under load" if early_p99 is None else f"{early_p99:.1f} ms",
        ),
        (
            f"{name}: body bytes read for refused uploads (bounded by the budget)",
            None,  # the budget bounds the bytes in flight at once, which totals do not show
            f"figures only: {f['read_mib'] or 0:.1f} MiB under load, "
            f"{f['burst_read_mib'] or 0:.1f} MiB in the burst; "
            f"{f['early_sent'] + f['burst_early_sent']:,} bytes sent for refusals from the headers",
        ),
    ]
    idle, loaded = f["health_idle_p99"], f["health_p99"]
    found.append(
        (
            f"{name}: health p99 under load at most {HEALTH_UNDER_LOAD:g}x idle (issue 24)",
            None if None in (idle, loaded) else loaded <= HEALTH_UNDER_LOAD * idle,
            "no figures"
            if None in (idle, loaded)
            else f"{loaded:.1f} ms vs {idle:.1f} ms idle: {loaded / idle:.1f}x (a trivial "
            f"server beside, its own process: {cell(f['beside_p99'], '{:.1f}')} ms under "
            f"load, {cell(f['beside_idle_p99'], '{:.1f}')} ms idle)",
        )
    )
    floor, burst_p99 = f["floor_p99"], f["burst_early_p99"]
    found.append(
        (
            f"{name}: burst refusals from the headers no slower than a trivial GET",
            None if None in (floor, burst_p99) else burst_p99 <= floor,
            "no refusals" if burst_p99 is None else f"p99 {burst_p99:.1f} ms vs GET {floor:.1f} ms",
        )
    )
    if off is not None:
        found += [
            (
                f"{name}: extractions/s at least the door off's",
                f["ok_per_s"] >= off["ok_per_s"],
                f"{f['ok_per_s']:.2f} vs {off['ok_per_s']:.2f}",
            ),
            (
                f"{name}: health p99 no worse than the door off's",
                None
                if None in (mine := f["health_p99"], theirs := off["health_p99"])
                else mine <= theirs,
                f"{cell(mine, '{:.1f}')} ms vs {cell(theirs, '{:.1f}')} ms",
            ),
            (
                f"{name}: burst serves at least {BURST_SHARE:.0%} of the door off's",
                (f["burst_ok"] or 0) >= BURST_SHARE * (off["burst_ok"] or 0),
                f"{f['burst_ok']} vs {off['burst_ok']}",
            ),
        ]
    return found


def against(
    name: str, f: dict[str, Any], base: str, b: dict[str, Any]
) -> list[tuple[str, bool | None, str]]:
    """Issue 24's "no worse" figures of ``name`` against ``base`` from the same run."""
    found: list[tuple[str, bool | None, str]] = []
    for label, key, better in (
        ("health p99", "health_p99", "lower"),
        ("refusal p99", "refusal_p99", "lower"),
        ("burst refusal p99", "burst_refusal_p99", "lower"),
        ("extractions/s", "ok_per_s", "higher"),
    ):
        mine, theirs = f[key], b[key]
        if key != "health_p99":
            label += " no worse"
        if None in (mine, theirs) or not theirs:
            found.append((f"{name} vs {base}: {label}", None, "no figures"))
            continue
        met = mine <= theirs if better == "lower" else mine >= theirs
        found.append(
            (f"{name} vs {base}: {label}", met, f"{mine:.2f} vs {theirs:.2f}: {mine / theirs:.2f}x")
        )
    return found


SLOW_TIMEOUT = 10.0  # DOOR["BODY_TIMEOUT"] of the slow-body run (the default is 20 s)
SLOW_TRICKLERS = 6 + 64 + 6  # more than the places (SLOTS + QUEUE) and the budget together
SLOW_CLIENTS = 4  # normal clients alongside


async def trickle(port: int, local: str, stop: float) -> tuple[int, float]:
    """Headers, then a byte every half second: the status the server answered (0: none
    before ``stop``) and the seconds it took."""
    began = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local, 0))
    head = (
        "POST /api/extract/ HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n"
        "X-Requested-With: bench\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        "Content-Length: 200000\r\n\r\n"
    )
    writer.write(head.encode())
    status = 0
    try:
        while time.monotonic() < stop:
            try:
                line = await asyncio.wait_for(reader.readline(), 0.5)
            except TimeoutError:
                writer.write(b"x")
                await writer.drain()
                continue
            if line.startswith(b"HTTP/1.1 ") and not line.startswith(b"HTTP/1.1 100"):
                status = int(line.split()[1])
                break
            if not line:
                break
    except ConnectionError:
        pass
    writer.close()
    return status, time.monotonic() - began


def slow_body(corpus: dict[str, bytes], args: argparse.Namespace) -> int:
    """More trickling clients than places and budget, normal uploads alongside."""
    from tests.support.servers import uvicorn

    state = Path(tempfile.mkdtemp(prefix="pdfpool-bench-"))
    (staged := state / "staged").mkdir()
    env = dict(
        DJANGO_SETTINGS_MODULE="benchmarks.variants_settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        DEMO_STATE_DIR=str(state),
        DEMO_LOG_LEVEL="WARNING",
        PDFPOOL_TEMP_DIR=str(staged),  # the example's FILE_UPLOAD_TEMP_DIR
        PDFPOOL_DOOR_BODY_TIMEOUT=str(SLOW_TIMEOUT),  # PDFPOOL["DOOR"]["BODY_TIMEOUT"]
    )
    mix = Mix(corpus)
    print(f"before: {machine()}", flush=True)
    try:
        with uvicorn("benchmarks.variants_asgi:application", env=env, cwd=EXAMPLE) as server:
            url, port = server.url + "/api/extract/", int(server.url.rsplit(":", 1)[1])
            small = multipart("warm.pdf", corpus["001-trivial/minimal-document.pdf"])
            assert asyncio.run(post(url, "warm", small, False)).status == 200

            async def run() -> tuple[list[tuple[int, float]], list[Record], float]:
                stop = time.monotonic() + 3 * SLOW_TIMEOUT
                tricklers = [
                    asyncio.create_task(trickle(port, address(i, 60), stop))
                    for i in range(SLOW_TRICKLERS)
                ]
                await asyncio.sleep(0.5)  # every place and the budget taken
                start = time.time()
                records, _wall = await offer_load(
                    url, mix, SLOW_CLIENTS, start, 2 * SLOW_TIMEOUT, args.pause
                )
                return await asyncio.gather(*tricklers), records, start

            trickled, records, _ = asyncio.run(run())
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(f"after: {machine()}\n")
    latencies = [r.latency for r in records]
    statuses = Counter(r.status for r in records)
    timed = [took for status, took in trickled if status == 408]
    print(f"slow-body run: BODY_TIMEOUT {SLOW_TIMEOUT:g} s (DOOR), {SLOW_TRICKLERS} tricklers")
    print(f"(a byte every 0.5 s), {SLOW_CLIENTS} normal clients for {2 * SLOW_TIMEOUT:g} s\n")
    print("| figure | value |\n|---|---|")
    print(f"| normal uploads answered | {len(records)} ({dict(sorted(statuses.items()))}) |")
    for q in (0.5, 0.99):
        print(f"| normal uploads: latency p{q * 100:g} s | {percentile(latencies, q):.2f} |")
    print(f"| normal uploads: latency max s | {max(latencies):.2f} |")
    trickle_statuses = dict(Counter(status for status, _ in trickled))
    print(f"| trickling clients: answers | {trickle_statuses} |")
    if timed:
        print(f"| trickling clients: 408 after s (min, max) | {min(timed):.2f}, {max(timed):.2f} |")
    met = max(latencies) < SLOW_TIMEOUT
    print(
        f"\n{verdict(met)} every normal upload answered within the body "
        f"deadline: max {max(latencies):.2f} s < {SLOW_TIMEOUT:g} s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (32)")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of load (30)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle health (10)")
    parser.add_argument("--pause", type=float, default=0.05, help="after a refusal (0.05 s)")
    parser.add_argument("--sample", type=float, default=0.05, help="tree sampling (0.05 s)")
    parser.add_argument("--quick", action="store_true", help="8 clients, 8 s: about a minute")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help=", ".join(VARIANTS))
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--lagwatch", type=Path, help="watch wake-ups in and beside the server (lagwatch.py)"
    )
    parser.add_argument("--slow-body", action="store_true", help="the slow-body run instead")
    parser.add_argument(
        "--plain-probes",
        action="store_true",
        help="health probes at the ordinary priority (their own CPU waits then count)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds, args.idle = 8, 8.0, 2.0
    names = args.variants.split(",")
    problem = None
    if not (args.corpus / "files.json").is_file():
        problem = f"bench_load needs the corpus of real PDFs at {args.corpus} (or --corpus DIR)"
    elif any(key.startswith("PDFPOOL_") for key in os.environ):
        problem = "unset the PDFPOOL_* variables: the example would read them"
    elif unknown := [name for name in names if name not in VARIANTS]:
        problem = f"unknown variants {unknown}: choose among {', '.join(VARIANTS)}"
    elif "door-httptools" in names and not all(map(importlib.util.find_spec, FAST_SERVER)):
        problem = "door-httptools needs httptools and uvloop: pip install 'uvicorn[standard]'"
    if problem:
        print(problem, file=sys.stderr)
        return 2
    corpus = load_corpus(args.corpus)
    if args.slow_body:
        return slow_body(corpus, args)
    print(f"python benchmarks/bench_load.py {' '.join(argv or sys.argv[1:])}".strip())
    print(f"before: {machine()}", flush=True)
    args.fifo = not args.plain_probes and probes_first()
    print(
        "health probes: "
        + (
            "SCHED_FIFO, so their own waits for a CPU stay out of the figures"
            if args.fifo
            else "ordinary priority: their own waits for a CPU count (--plain-probes, or not root)"
        ),
        flush=True,
    )
    results = {}
    for name in names:
        print(f"{name}: {args.clients} clients for {args.seconds:g} s, then a burst", flush=True)
        results[name] = figures(bench_variant(name, VARIANTS[name], corpus, args))
        print(f"  done: {dict(results[name]['statuses'])}", flush=True)
    print(f"after: {machine()}\n")
    for name, found in lags.items():
        print(f"{name}: a 1 ms sleep woke late by (ms) {found}")
    lines = table(results, ROWS, names[0])
    lines += statuses(results, "statuses", "answers") + statuses(
        results, "burst_statuses", "burst:"
    )
    print("\n".join(lines))
    print(f"\nerror codes: { {n: dict(r['codes']) for n, r in results.items()} }")
    for label, key in (("staged uploads left behind", "leftovers"), ("orphans", "orphans")):
        if found := {n: r[key] for n, r in results.items() if r[key]}:
            print(f"{label}: {found}")
    print()
    off = results.get("nodoor")
    for name in names:
        if VARIANTS[name].runs == "pdfpool":
            for target, met, detail in targets(
                name, results[name], None if name == "nodoor" else off
            ):
                print(f"{verdict(met)} {target}: {detail}")
    for base in ("door-classic", "door-newthreads"):  # issue 24's fixes against before them
        if "door" in results and base in results:
            for target, met, detail in against("door", results["door"], base, results[base]):
                print(f"{verdict(met)} {target}: {detail}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=dict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
