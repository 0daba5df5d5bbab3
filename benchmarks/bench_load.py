"""The example under load: the pool against what a Django team writes without it, one run.

``python benchmarks/bench_load.py [--clients 16] [--seconds 20] [--short] [--variants ...]``
starts the example project (``example_project/``) under uvicorn, one server per variant, with
the benchmark's routes (``benchmarks/variants.py``), and offers each the same load:

- **door**: the example as it ships: ``@pdf_pooled`` (SLOTS 2, QUEUE 4, WAIT 10 s), the door
  deciding from the headers; the baseline every ratio is against;
- **nodoor**: ``PDFPOOL_DOOR=0``: every body is read, parsed, staged and hashed first;
- **declared**: the door, with clients that declare each upload's digest (``Pdf-Digest``);
- **naive**: no admission: a cold child per upload, as many at once as there are uploads;
- **executor**: a ``ProcessPoolExecutor(SLOTS)``: bounded workers, an unbounded queue;
- **celery**: a Celery task per upload on a real worker (prefork, concurrency SLOTS,
  ``worker_max_memory_per_child`` MEMORY_LIMIT, time limits TIMEOUT) and a real redis-server,
  the view waiting for the result (``benchmarks/celery_peer.py``; needs ``redis-server``).

Clients send as curl does with ``Expect: 100-continue`` (``benchmarks/uploader.py``), each
from its own loopback address (another anonymous caller), back to back for T seconds; after a
refusal (429, 503) a client waits 50 ms. Half the uploads are identical (one of three corpus
files), half distinct. A probe polls ``/bench/health/`` every 50 ms (idle first, then under
the load); another samples the RSS of the server's process tree (and the Celery worker's).
Then, for the pool's variants, the pool idle again, a **burst**: 200 uploads from 100
addresses sent at once, with trivial GETs alongside (the floor a refusal is compared with).

Every refusal's ``Retry-After`` is held against the time until a place actually freed (the
next answer to an admitted upload after it): the share shorter than that, and the median ratio.

Needs the corpus (``../shared/corpus`` or ``--corpus``; exit status 2 without it).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, benchmarks.*

from benchmarks.loadkit import (
    DEFAULT_CORPUS,
    EXAMPLE,
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
from benchmarks.uploader import REFUSED, Record, address, burst, offer_load, post


@dataclass(frozen=True)
class Variant:
    path: str
    env: dict[str, str] = field(default_factory=dict)
    declare: bool = False  # clients declare each upload's digest
    runs: str = "pdfpool"  # its count in /bench/stats/
    pooled: bool = True  # the pool admits it: a burst follows the load


VARIANTS = {
    "door": Variant("/api/extract/"),
    "nodoor": Variant("/api/extract/", {"PDFPOOL_DOOR": "0"}),
    "declared": Variant("/api/extract/", declare=True),
    "naive": Variant("/bench/naive/", runs="naive", pooled=False),
    "executor": Variant("/bench/executor/", runs="executor", pooled=False),
    "celery": Variant("/bench/celery/", runs="celery", pooled=False),
}
DEFAULT_VARIANTS = ",".join(VARIANTS)
FLOOR_GETS, FLOOR_EVERY, FLOOR_ROUNDS = 10, 0.05, 40  # trivial GETs alongside the burst


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
    runs: int
    health_idle: list[float | None]
    health_load: list[float | None]
    samples: list[Any]  # the trees' RSS during the load
    burst: list[Record] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)  # ms of trivial GETs during the burst
    leftovers: list[str] = field(default_factory=list)  # staged uploads left behind
    orphans: list[str] = field(default_factory=list)  # descendants alive after the server


def bench_variant(
    variant: Variant, corpus: dict[str, bytes], args: argparse.Namespace, peer: CeleryPeer | None
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
    mix = Mix(corpus)
    try:
        with uvicorn("benchmarks.variants_asgi:application", env=env, cwd=EXAMPLE) as server:
            url, health_url = server.url + variant.path, server.url + "/bench/health/"
            small = multipart("warm.pdf", corpus["001-trivial/minimal-document.pdf"])
            for _ in range(3):  # the pool and its spare, or the workers, exist before the clock
                assert asyncio.run(post(url, "warm", small, variant.declare)).status == 200
            pids = [server.pid] + ([peer.worker.pid] if peer else [])
            sampler = run_probe("tree", ",".join(map(str, pids)), 0.05)
            health = run_probe("health", health_url, time.time(), args.idle, 0.05)
            health_idle = json.loads(health.communicate()[0])
            before = get_json(server.url + "/bench/stats/")["runs"][variant.runs]
            start = time.time() + 1.0
            health = run_probe("health", health_url, start, args.seconds, 0.05)
            records, wall = asyncio.run(
                offer_load(url, mix, args.clients, start, args.seconds, 0.05, variant.declare)
            )
            ended = time.time()
            health_load = json.loads(health.communicate()[0])
            runs = get_json(server.url + "/bench/stats/")["runs"][variant.runs] - before
            samples = [s for s in json.loads(sampler.communicate("")[0]) if start <= s[0] <= ended]
            result = Result(records, wall, runs, health_idle, health_load, samples)
            if variant.pooled:
                until_idle(server.url)
                result.burst, result.floor = asyncio.run(
                    burst_with_floor(url, server.url + "/bench/plain/", mix, variant.declare)
                )
                until_idle(server.url)
            descendants = psutil.Process(server.pid).children(recursive=True)
        result.leftovers = [path.name for path in staged.iterdir()]
        result.orphans = outlived(descendants)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return result


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
) -> tuple[list[Record], list[float]]:
    """The burst, and trivial GETs through Django's middleware sent while it is answered."""

    async def floor() -> list[float]:
        found: list[float] = []
        for turn in range(FLOOR_ROUNDS):
            found += await asyncio.gather(
                *(get_ms(plain, address(turn * FLOOR_GETS + i, 40)) for i in range(FLOOR_GETS))
            )
            await asyncio.sleep(FLOOR_EVERY)
        return found

    (records, _wall), gets = await asyncio.gather(burst(url, mix, declare), floor())
    return records, gets


# --- the figures --------------------------------------------------------------------------


def calibration(records: list[Record]) -> dict[str, Any]:
    """Each refusal's Retry-After against the seconds until a place freed after it: the next
    answer to an admitted upload (a 200 or a 422: its job ended, a place with it)."""
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
        ratios.append(r.retry_after / max(actual, 0.001))
    return {
        "retry_n": given,
        "retry_short": short / given if given else None,
        "retry_ratio": statistics.median(ratios) if ratios else None,
        "retry_under_1s": sum(
            r.retry_after < 1 for r in records if r.retry_after is not None and r.status != 200
        ),
    }


def figures(result: Result) -> dict[str, Any]:
    records = result.records
    ok = [r for r in records if r.status == 200]
    refused = [r for r in records if r.status in REFUSED]
    early = [r for r in refused if r.before_body]
    trees = [s[1] for s in result.samples]
    servers = [s[2] for s in result.samples]
    health_idle = [v for v in result.health_idle if v is not None]
    health_load = [v for v in result.health_load if v is not None]
    burst_refused = [r for r in result.burst if r.status in REFUSED]
    burst_early = [r for r in burst_refused if r.before_body]
    return {
        "answers": len(records),
        "ok": len(ok),
        "ok_per_s": len(ok) / result.wall if result.wall else 0.0,
        "runs": result.runs,
        "ok_p50": percentile([r.latency for r in ok], 0.5),
        "ok_p99": percentile([r.latency for r in ok], 0.99),
        "refused": len(refused),
        "refusal_p99": percentile([r.latency * 1000 for r in refused], 0.99),
        "early": len(early),
        "read_mib": sum(r.read or 0 for r in refused) / MiB,
        "health_idle_p99": percentile(health_idle, 0.99),
        "health_p99": percentile(health_load, 0.99),
        "health_failed": sum(v is None for v in result.health_load),
        "tree_peak": max(trees, default=0) / MiB,
        "server_peak": max(servers, default=0) / MiB,
        "burst_ok": sum(r.status == 200 for r in result.burst) if result.burst else None,
        "burst_refused": len(burst_refused) if result.burst else None,
        "burst_early_p99": percentile([r.latency * 1000 for r in burst_early], 0.99),
        "floor_p99": percentile(result.floor, 0.99),
        "burst_read_mib": sum(r.read or 0 for r in burst_refused) / MiB if result.burst else None,
        **calibration(records),
        "statuses": dict(Counter(str(r.status) for r in records)),
        "leftovers": result.leftovers,
        "orphans": result.orphans,
    }


ROWS = [
    ("extractions answered (200)", "ok", "{:,.0f}"),
    ("... per second", "ok_per_s", "{:.2f}"),
    ("extraction runs (the rest shared a job)", "runs", "{:,.0f}"),
    ("latency of a 200, p50 s", "ok_p50", "{:.2f}"),
    ("latency of a 200, p99 s", "ok_p99", "{:.2f}"),
    ("refusals (429, 503)", "refused", "{:,.0f}"),
    ("... answered before the body", "early", "{:,.0f}"),
    ("refusal latency p99 ms", "refusal_p99", "{:.1f}"),
    ("body MiB read for refused uploads", "read_mib", "{:,.1f}"),
    ("health p99 ms, idle", "health_idle_p99", "{:.1f}"),
    ("health p99 ms, under load", "health_p99", "{:.1f}"),
    ("health polls failed", "health_failed", "{:,.0f}"),
    ("peak RSS, server (and worker) trees MiB", "tree_peak", "{:,.0f}"),
    ("peak RSS, server process MiB", "server_peak", "{:,.0f}"),
    ("Retry-After: refusals held to a place freed", "retry_n", "{:,.0f}"),
    ("Retry-After: share shorter than the actual wait", "retry_short", "{:.0%}"),
    ("Retry-After: median given / actual", "retry_ratio", "{:.2f}"),
    ("Retry-After under 1 s", "retry_under_1s", "{:,.0f}"),
    ("burst (200 at once): 200s", "burst_ok", "{:,.0f}"),
    ("burst: refusals", "burst_refused", "{:,.0f}"),
    ("burst: refusal from the headers p99 ms", "burst_early_p99", "{:.1f}"),
    ("burst: a trivial GET alongside p99 ms", "floor_p99", "{:.1f}"),
    ("burst: body MiB read for refused uploads", "burst_read_mib", "{:,.1f}"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of load (20)")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle health (5)")
    parser.add_argument("--short", action="store_true", help="12 clients, 8 s: for make bench")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help=", ".join(VARIANTS))
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", type=Path, help="also write the figures here")
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
    print(f"python benchmarks/bench_load.py {' '.join(argv or sys.argv[1:])}".strip())
    print(f"before: {machine()}", flush=True)
    results = {}
    for name in names:
        print(f"{name}: {args.clients} clients for {args.seconds:g} s", flush=True)
        if name == "celery":
            with CeleryPeer() as peer:
                results[name] = figures(bench_variant(VARIANTS[name], corpus, args, peer))
        else:
            results[name] = figures(bench_variant(VARIANTS[name], corpus, args, None))
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
