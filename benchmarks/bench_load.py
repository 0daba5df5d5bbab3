"""The example under load: the pool against what a Django team writes without it, one run.

``python benchmarks/bench_load.py [--clients 16] [--seconds 20] [--short] [--variants ...]``
serves the example project under uvicorn, one server per variant (``benchmarks/variants.py``),
and offers each the same load:

- **door**: the example as it ships: ``@pdf_pooled`` (SLOTS 2, QUEUE 4, WAIT 10 s), the door
  deciding from the headers; the baseline every ratio is against;
- **nodoor**: ``PDFPOOL_DOOR=0``: every body is read, parsed, staged and hashed first;
- **declared**: the door, with clients that declare each upload's digest (``Pdf-Digest``);
- **naive**: no admission: a cold child per upload, as many at once as there are uploads;
- **executor**: a ``ProcessPoolExecutor(SLOTS)``: bounded workers, an unbounded queue;
- **celery**: a Celery task per upload on a real worker and redis-server (``celery_peer.py``).

Clients send as curl does with ``Expect: 100-continue`` (``uploader.py``), each from its own
loopback address, back to back for T seconds (50 ms after a refusal); half the uploads are
identical (one of three corpus files), half distinct. A probe polls ``/bench/health/`` every
50 ms, idle then under the load; another samples the RSS of the server's process tree (and the
Celery worker's); a thread reads the pool's jobs every second. Then, for the pool's variants,
``--bursts`` **bursts** (5): 200 uploads from 100 addresses at once, the health probe polling
alongside, each burst's figures the median of the bursts'. Each
refusal's ``Retry-After`` is held to the time until a place freed (``calibration``).

``--soak MINUTES`` (``make soak``): the door variant for minutes, a few hostile PDFs among the
uploads; it checks the pool's bounds every second, the server's RSS, the answers, and that
nothing is left: SOAK PASS or FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, benchmarks.*

from benchmarks.loadkit import (
    DEFAULT_CORPUS,
    EXAMPLE,
    HOT,
    ROOT,
    MiB,
    Mix,
    load_corpus,
    machine,
    multipart,
    outlived,
    percentile,
    run_probe,
    table,
)
from benchmarks.uploader import REFUSED, Record, burst, offer_load, post


@dataclass(frozen=True)
class Variant:
    path: str
    env: dict[str, str] = field(default_factory=dict)
    declare: bool = False  # clients declare each upload's digest
    pooled: bool = True  # the pool admits it: a burst follows the load


VARIANTS = {
    "door": Variant("/api/extract/"),
    "nodoor": Variant("/api/extract/", {"PDFPOOL_DOOR": "0"}),
    "declared": Variant("/api/extract/", declare=True),
    "naive": Variant("/bench/naive/", pooled=False),
    "executor": Variant("/bench/executor/", pooled=False),
    "celery": Variant("/bench/celery/", pooled=False),
}
DEFAULT_VARIANTS = ",".join(VARIANTS)
HOSTILE_SHARE = 0.02  # of the soak's uploads
SOAK_RSS_DRIFT = 0.10
SOAK_ANSWERS = {"200", "422", "429", "503"}


def get_json(url: str) -> Any:
    import httpx

    return httpx.get(url, timeout=30).json()


def until_idle(base: str, timeout: float = 120.0) -> None:
    """Wait until the pool has no job in flight (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while get_json(base + "/bench/stats/")["busy"] and time.monotonic() < deadline:
        time.sleep(0.2)


class CeleryPeer:
    """A redis-server and a Celery worker for the ``celery`` variant; stopped on exit."""

    def __enter__(self) -> CeleryPeer:
        from tests.support.redis_server import RedisServer

        self.redis = RedisServer().start()
        self.env = {"BENCH_CELERY_URL": self.redis.url}
        command = [sys.executable, "-m", "celery", "-A", "benchmarks.celery_peer", "worker"]
        command += ["--concurrency", "2", "--loglevel", "WARNING", "--without-gossip"]
        command += ["--without-mingle", "--without-heartbeat"]
        self.log = tempfile.TemporaryFile()
        self.worker = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **self.env}, stdout=self.log, stderr=self.log
        )
        os.environ["BENCH_CELERY_URL"] = self.redis.url  # for the ping below
        from benchmarks.celery_peer import app

        app.conf.broker_url = app.conf.result_backend = self.redis.url
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=1.0):
            if time.monotonic() > deadline or self.worker.poll() is not None:
                self.log.seek(0)
                print(self.log.read().decode(errors="replace")[-4000:], file=sys.stderr)
                raise RuntimeError("the Celery worker did not answer a ping within 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.terminate()  # warm shutdown: the running tasks end first
        try:
            self.worker.wait(60)
        except subprocess.TimeoutExpired:
            self.worker.kill()
        self.redis.stop()
        self.log.close()


@dataclass
class Result:
    records: list[Record]
    wall: float  # from the start of the load to its last answer
    health_idle: list[float | None]
    health_load: list[float | None]
    samples: list[Any]  # the trees' RSS during the load
    pool: list[tuple[float, int, int]]  # jobs running and queued, every second
    bursts: list[tuple[list[Record], list[float]]] = field(default_factory=list)
    # each burst's answers, and the health ms alongside it
    leftovers: list[str] = field(default_factory=list)  # staged uploads left behind
    orphans: list[str] = field(default_factory=list)  # descendants alive after the server


class SoakMix(Mix):
    """The load's mix with a few hostile PDFs (each distinct: a nonce after %%EOF)."""

    def __init__(self, corpus: dict[str, bytes]) -> None:
        super().__init__(corpus)
        from tests.support import pdfs

        self.hostile = {
            "flate_bomb": pdfs.flate_bomb(),
            "cpu_bomb": pdfs.cpu_bomb(megabytes=3),
            "truncated": pdfs.truncated(corpus[HOT[1]], "first"),
        }

    def pick(self, rng: random.Random) -> tuple[str, str, bytes]:
        if rng.random() < HOSTILE_SHARE:
            name = rng.choice(sorted(self.hostile))
            self._serial += 1
            data = self.hostile[name] + f"\n%soak {self._serial}\n".encode()
            return "hostile", name, multipart(name + ".pdf", data)
        return super().pick(rng)


def watch_pool(url: str, out: list[tuple[float, int, int]], stop: threading.Event) -> None:
    """Every second until ``stop``: (wall time, jobs running, jobs queued) in the pool."""
    while not stop.wait(1.0):
        with contextlib.suppress(Exception):
            found = get_json(url)
            out.append((time.time(), found["running"], found["queued"]))


def bench_variant(
    variant: Variant, mix: Mix, args: argparse.Namespace, peer: CeleryPeer | None
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
        PDFPOOL_TEMP_DIR=str(staged),  # the example's FILE_UPLOAD_TEMP_DIR, checked after
        UVICORN_HTTP="h11",  # the pure-Python parser and asyncio's loop, installed or not
        UVICORN_LOOP="asyncio",
        **variant.env,
        **(peer.env if peer else {}),
    )
    try:
        with uvicorn("benchmarks.variants_asgi:application", env=env, cwd=EXAMPLE) as server:
            url, health_url = server.url + variant.path, server.url + "/bench/health/"
            small = multipart("warm.pdf", mix.corpus["001-trivial/minimal-document.pdf"])
            for _ in range(3):  # the pool and its spare, or the workers, exist before the clock
                assert asyncio.run(post(url, "warm", small, variant.declare)).status == 200
            pids = [server.pid] + ([peer.worker.pid] if peer else [])
            sampler = run_probe("tree", ",".join(map(str, pids)), 0.05)
            health = run_probe("health", health_url, time.time(), args.idle, 0.05)
            health_idle = json.loads(health.communicate()[0])
            start = time.time() + 1.0
            health = run_probe("health", health_url, start, args.seconds, 0.05)
            stop, pool = threading.Event(), []
            watcher = threading.Thread(
                target=watch_pool, args=(server.url + "/bench/stats/", pool, stop)
            )
            watcher.start()
            records, wall = asyncio.run(
                offer_load(url, mix, args.clients, start, args.seconds, 0.05, variant.declare)
            )
            ended = time.time()
            stop.set()
            watcher.join()
            health_load = json.loads(health.communicate()[0])
            samples = [s for s in json.loads(sampler.communicate("")[0]) if start <= s[0] <= ended]
            result = Result(records, wall, health_idle, health_load, samples, pool)
            for _ in range(args.bursts if variant.pooled and not args.soak else 0):
                until_idle(server.url)
                health = run_probe("health", health_url, time.time() + 0.5, 4.0, 0.05)
                time.sleep(0.5)  # the probe connected first
                answers, _ = asyncio.run(burst(url, mix, variant.declare))
                floor = [v for v in json.loads(health.communicate()[0]) if v is not None]
                result.bursts.append((answers, floor))
                until_idle(server.url)
            descendants = psutil.Process(server.pid).children(recursive=True)
        result.leftovers = [path.name for path in staged.iterdir()]
        result.orphans = outlived(descendants)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return result


# --- the figures --------------------------------------------------------------------------


def calibration(records: list[Record]) -> dict[str, Any]:
    """Each refusal's Retry-After against the seconds until a place freed after it (the next
    200 or 422: a job ended), that wait as a header gives it (whole seconds, at least 1)."""
    freed = sorted(r.ended for r in records if r.status in (200, 422))
    given, ratios, short = 0, [], 0
    for r in records:
        if r.status not in REFUSED or r.retry_after is None:
            continue
        at = bisect.bisect_right(freed, r.ended)
        if at == len(freed):
            continue  # nothing freed before the run ended: no actual time to hold it to
        actual = freed[at] - r.ended
        given += 1
        short += r.retry_after < actual
        ratios.append(r.retry_after / max(1, math.ceil(actual)))  # as a header could say it
    return {
        "retry_n": given,
        "retry_short": short / given if given else None,
        "retry_ratio": statistics.median(ratios) if ratios else None,
        "retry_under_1s": sum(
            r.retry_after < 1 for r in records if r.retry_after is not None and r.status != 200
        ),
    }


def burst_figures(bursts: list[tuple[list[Record], list[float]]]) -> dict[str, Any]:
    """The median over the bursts of each one's figures (a single burst swings by a third)."""
    each = []
    for answers, floor in bursts:
        refused = [r for r in answers if r.status in REFUSED]
        slowest = percentile([r.latency * 1000 for r in refused if r.before_body], 0.99)
        trivial = percentile(floor, 0.99)
        each.append({
            "burst_ok": sum(r.status == 200 for r in answers),
            "burst_refused": len(refused),
            "burst_early_p99": slowest,
            "floor_p99": trivial,
            "burst_early_ratio": slowest / trivial if slowest and trivial else None,
            "burst_read_mib": sum(r.read or 0 for r in refused) / MiB,
        })  # fmt: skip
    keys = ("burst_ok", "burst_refused", "burst_early_p99", "floor_p99", "burst_early_ratio")
    found = {key: [f[key] for f in each if f[key] is not None] for key in (*keys, "burst_read_mib")}
    return {key: statistics.median(values) if values else None for key, values in found.items()}


def figures(result: Result) -> dict[str, Any]:
    records = result.records
    ok = [r for r in records if r.status == 200]
    refused = [r for r in records if r.status in REFUSED]
    early = [r for r in refused if r.before_body]
    trees = [s[1] for s in result.samples]
    health_idle = [v for v in result.health_idle if v is not None]
    health_load = [v for v in result.health_load if v is not None]
    return {
        "ok": len(ok),
        "ok_per_s": len(ok) / result.wall if result.wall else 0.0,
        "ok_p50": percentile([r.latency for r in ok], 0.5),
        "ok_p99": percentile([r.latency for r in ok], 0.99),
        "refused": len(refused),
        "refusal_p99": percentile([r.latency * 1000 for r in refused], 0.99),
        "early": len(early),
        "read_mib": sum(r.read or 0 for r in refused) / MiB,
        "health_idle_p99": percentile(health_idle, 0.99),
        "health_p99": percentile(health_load, 0.99),
        "tree_peak": max(trees, default=0) / MiB,
        "running_max": max((p[1] for p in result.pool), default=0),
        "queued_max": max((p[2] for p in result.pool), default=0),
        **burst_figures(result.bursts),
        **calibration(records),
        "statuses": dict(Counter(str(r.status) for r in records)),
        "leftovers": result.leftovers,
        "orphans": result.orphans,
    }


ROWS = [
    ("extractions answered (200)", "ok", "{:,.0f}"),
    ("... per second", "ok_per_s", "{:.2f}"),
    ("latency of a 200, p50 s", "ok_p50", "{:.2f}"),
    ("latency of a 200, p99 s", "ok_p99", "{:.2f}"),
    ("most jobs running / queued in the pool (SLOTS 2, QUEUE 4)", "running_max", "{:,.0f}"),
    ("... queued", "queued_max", "{:,.0f}"),
    ("refusals (429, 503)", "refused", "{:,.0f}"),
    ("... answered before the body", "early", "{:,.0f}"),
    ("refusal latency p99 ms", "refusal_p99", "{:.1f}"),
    ("body MiB read for refused uploads", "read_mib", "{:,.1f}"),
    ("health p99 ms, idle", "health_idle_p99", "{:.1f}"),
    ("health p99 ms, under load", "health_p99", "{:.1f}"),
    ("peak RSS, server (and Celery worker) trees MiB", "tree_peak", "{:,.0f}"),
    ("Retry-After: share shorter than the actual wait", "retry_short", "{:.0%}"),
    ("Retry-After: median given / actual (whole s, >= 1)", "retry_ratio", "{:.2f}"),
    ("Retry-After under 1 s", "retry_under_1s", "{:,.0f}"),
    ("burst (200 at once): 200s", "burst_ok", "{:,.0f}"),
    ("burst: refusals", "burst_refused", "{:,.0f}"),
    ("burst: refusal from the headers p99 ms", "burst_early_p99", "{:.1f}"),
    ("burst: health p99 ms alongside", "floor_p99", "{:.1f}"),
    ("burst: refusal from the headers p99 / health p99", "burst_early_ratio", "{:.2f}"),
    ("burst: body MiB read for refused uploads", "burst_read_mib", "{:,.1f}"),
]


def soak(result: Result, minutes: float) -> bool:
    """The soak's checks: the pool's bounds every second, the server's RSS flat (the last
    window's mean against the first after warm-up), expected answers, nothing left."""
    seconds = minutes * 60
    window = 60.0 if minutes >= 5 else seconds / 5
    began = result.samples[0][0] if result.samples else 0.0

    def mean_rss(start: float) -> float:
        found = [s[2] for s in result.samples if start <= s[0] - began < start + window]
        return statistics.fmean(found) if found else float("nan")

    first, last = mean_rss(window), mean_rss(seconds - window)
    statuses = {str(r.status) for r in result.records}
    checks = {
        "running <= SLOTS (2)": max((p[1] for p in result.pool), default=0) <= 2,
        "queued <= QUEUE (4)": max((p[2] for p in result.pool), default=0) <= 4,
        f"server RSS, last window / first: {last / first:.3f}, within 10 % (5 min or more)": (
            minutes < 5 or abs(last / first - 1) <= SOAK_RSS_DRIFT
        ),
        f"only 200, 422, 429, 503 answers: {sorted(statuses)}": statuses <= SOAK_ANSWERS,
        f"a pool sample every second: {len(result.pool)}": len(result.pool) >= 0.9 * seconds,
        "nothing left: staged uploads, orphans": not result.leftovers and not result.orphans,
    }
    for name, good in checks.items():
        print(f"  {'ok  ' if good else 'FAIL'} {name}")
    passed = all(checks.values())
    print(f"{'SOAK PASS' if passed else 'SOAK FAIL'}: {minutes:g} min")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of load (20)")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle health (5)")
    parser.add_argument("--short", action="store_true", help="12 clients, 8 s: for make bench")
    parser.add_argument("--bursts", type=int, default=5, help="bursts after the load (5)")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help=", ".join(VARIANTS))
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--soak", type=float, metavar="MINUTES", help="the soak run instead")
    args = parser.parse_args(argv)
    if args.short:
        args.clients, args.seconds, args.idle = 12, 8.0, 2.0
    names = args.variants.split(",")
    problem = None
    if not (args.corpus / "files.json").is_file():
        problem = f"bench_load needs the corpus of real PDFs at {args.corpus} (or --corpus DIR)"
    elif any(key.startswith("PDFPOOL_") for key in os.environ):
        problem = "unset the PDFPOOL_* variables: the example would read them"
    elif unknown := [name for name in names if name not in VARIANTS]:
        problem = f"unknown variants {unknown}: choose among {', '.join(VARIANTS)}"
    elif "celery" in names and not shutil.which("redis-server"):
        problem = "the celery variant needs redis-server (make redis-deps)"
    if problem:
        print(problem, file=sys.stderr)
        return 2
    corpus = load_corpus(args.corpus)
    if args.soak:  # the door variant for minutes, hostile PDFs among the uploads
        args.seconds = args.soak * 60
        print(f"soak: {args.clients} clients for {args.soak:g} min; before: {machine()}")
        return (
            0
            if soak(bench_variant(VARIANTS["door"], SoakMix(corpus), args, None), args.soak)
            else 1
        )
    print(f"python benchmarks/bench_load.py {' '.join(argv or sys.argv[1:])}".strip())
    print(f"before: {machine()}", flush=True)
    results = {}
    for name in names:
        print(f"{name}: {args.clients} clients for {args.seconds:g} s", flush=True)
        if name == "celery":
            with CeleryPeer() as peer:
                results[name] = figures(bench_variant(VARIANTS[name], Mix(corpus), args, peer))
        else:
            results[name] = figures(bench_variant(VARIANTS[name], Mix(corpus), args, None))
        print(f"  done: {results[name]['statuses']}", flush=True)
    print(f"after: {machine()}\n")
    print("\n".join(table(results, ROWS, names[0])))
    print(f"\nanswers by status: { {n: r['statuses'] for n, r in results.items()} }")
    for label, key in (("staged uploads left behind", "leftovers"), ("orphans", "orphans")):
        if found := {n: r[key] for n, r in results.items() if r[key]}:
            print(f"{label}: {found}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
