"""Soak: the example project under mixed load for minutes, its invariants sampled each second.

``python benchmarks/soak.py [--minutes 10] [--clients 16]`` (``make soak``) serves the example
project (``example_project/``, ``demo.asgi:application``, default settings: SLOTS 2, QUEUE 4,
a warm spare) under uvicorn and offers it the load of ``bench_load.py`` (identical and
distinct corpus PDFs, the 117-page one among them, each client its own caller), plus a few
hostile PDFs (a 1 GB flate bomb, a few seconds of text operators, a truncated file), for the
whole run. Every second it samples:

- extraction children of the server: at most SLOTS + 1 (the warm spare, idle or starting up
  to replace one taken), not counting a child already in the kernel's exit path (it has
  answered; the pool frees the slot on the answer, before the child is reaped);
- the pool's ``running`` <= SLOTS and ``queued`` <= QUEUE, from the example's own job-state
  endpoint (``/api/jobs/<sha256>/`` answers them for any digest);
- the RSS of the server process alone: the mean of the last minute within 10 % of the mean
  of the first minute after warm-up (the first minute). With ``--minutes`` under 5 the
  warm-up and the two windows are a fifth of the run each.

After the load it checks that nothing is left: the staged-upload directory is empty and no
child but the spare remains. It prints ``SOAK PASS`` or ``SOAK FAIL`` and the figures, and
exits 0 or 1. Needs the corpus (``../shared/corpus``), like bench_load.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, benchmarks.*

from benchmarks.loadkit import DEFAULT_CORPUS, EXAMPLE, HOT, ROOT, Mix, load_corpus, multipart
from benchmarks.uploader import offer_load

SLOTS, QUEUE = 2, 4  # the defaults the example runs with
HOSTILE_SHARE = 0.02
RSS_DRIFT = 0.10
PF_EXITING = 0x4  # /proc/PID/stat flags: the process is exiting
EXPECTED = {200, 422, 429, 503}


class SoakMix(Mix):
    """bench_load's mix, with a few hostile PDFs (each distinct: a nonce after %%EOF)."""

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


def working_children(pid: int) -> tuple[int, int]:
    """(extraction children not exiting, all extraction children) of ``pid``."""
    import psutil

    working = total = 0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "django_pdfpool.sandbox.child_main" not in " ".join(child.cmdline()):
                continue
            stat = Path(f"/proc/{child.pid}/stat").read_bytes()
        except (psutil.Error, OSError):
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        total += 1
        if fields[0] != b"Z" and not int(fields[6]) & PF_EXITING:
            working += 1
    return working, total


class Sampler(threading.Thread):
    """Once a second: children, the pool's running and queued, the server's RSS."""

    def __init__(self, url: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.url, self.pid = url, pid
        self.samples: list[dict] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import httpx
        import psutil

        server = psutil.Process(self.pid)
        state_url = f"{self.url}/api/jobs/{'0' * 64}/"
        with httpx.Client(timeout=10) as http:
            due = time.monotonic()
            while not self.stop.is_set():
                try:
                    pool = http.get(state_url).json()
                    working, total = working_children(self.pid)
                    self.samples.append(
                        {
                            "t": time.monotonic(),
                            "working": working,
                            "children": total,
                            "running": pool["running"],
                            "queued": pool["queued"],
                            "rss": server.memory_info().rss,
                        }
                    )
                except (httpx.HTTPError, psutil.Error, ValueError, KeyError) as error:
                    self.errors.append(f"{type(error).__name__}: {error}")
                due += 1.0
                self.stop.wait(max(0.0, due - time.monotonic()))


def window_mean(samples: list[dict], start: float, end: float) -> float:
    values = [s["rss"] for s in samples if start <= s["t"] < end]
    return statistics.fmean(values) if values else float("nan")


def soak(args: argparse.Namespace, corpus: dict[str, bytes]) -> bool:
    from tests.support.servers import uvicorn

    state = Path(tempfile.mkdtemp(prefix="pdfpool-soak-"))
    staged = state / "staged"
    staged.mkdir()
    env = {
        "PYTHONPATH": str(ROOT),
        "DEMO_STATE_DIR": str(state),
        "DEMO_LOG_LEVEL": "WARNING",
        "PDFPOOL_TEMP_DIR": str(staged),  # the example's FILE_UPLOAD_TEMP_DIR
    }
    seconds = args.minutes * 60
    window = 60.0 if args.minutes >= 5 else seconds / 5
    mix = SoakMix(corpus)
    try:
        with uvicorn("demo.asgi:application", env=env, cwd=EXAMPLE) as server:
            url = server.url + "/api/extract/"
            sampler = Sampler(server.url, server.pid)
            start = time.time() + 0.5
            sampler.start()
            records, wall = asyncio.run(
                offer_load(url, mix, args.clients, start, seconds, args.pause)
            )
            sampler.stop.set()
            sampler.join(10)
            began = sampler.samples[0]["t"] if sampler.samples else 0.0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the spare may be starting: give it a moment
                working, _ = working_children(server.pid)
                if not list(staged.iterdir()) and working <= 1:
                    break
                time.sleep(0.2)
            left_files = [path.name for path in staged.iterdir()]
            left_children = working_children(server.pid)[0]
    finally:
        shutil.rmtree(state, ignore_errors=True)

    samples = sampler.samples
    statuses = Counter(str(r.status) for r in records)
    first = window_mean(samples, began + window, began + 2 * window)
    last = window_mean(samples, began + seconds - window, began + seconds)
    drift = (last - first) / first
    unexpected = {s: n for s, n in statuses.items() if not s.isdigit() or int(s) not in EXPECTED}
    checks = {
        f"children <= SLOTS + 1 spare = {SLOTS + 1}": max(s["working"] for s in samples)
        <= SLOTS + 1,
        f"running <= SLOTS = {SLOTS}": max(s["running"] for s in samples) <= SLOTS,
        f"queued <= QUEUE = {QUEUE}": max(s["queued"] for s in samples) <= QUEUE,
        f"server RSS flat within {RSS_DRIFT:.0%}": abs(drift) <= RSS_DRIFT,
        "only 200, 422, 429, 503 answers": not unexpected,
        "a sample every second": len(samples) >= 0.95 * seconds and not sampler.errors,
        "nothing left: staged uploads, children beyond the spare": not left_files
        and left_children <= 1,
    }
    passed = all(checks.values())
    kinds = Counter(r.kind for r in records)
    ok = sum(r.status == 200 for r in records)
    print(f"{'SOAK PASS' if passed else 'SOAK FAIL'}: {args.minutes:g} min, {args.clients} clients")
    for name, good in checks.items():
        print(f"  {'ok  ' if good else 'FAIL'} {name}")
    print(
        f"  uploads {len(records):,} ({dict(kinds)}), answers {dict(statuses)}, "
        f"{ok / wall:.2f} successful extractions/s"
    )
    print(
        f"  samples {len(samples)}, sampler errors {len(sampler.errors)}; max children at work "
        f"{max(s['working'] for s in samples)} (all, incl. exiting: "
        f"{max(s['children'] for s in samples)}), max running {max(s['running'] for s in samples)}"
        f", max queued {max(s['queued'] for s in samples)}"
    )
    low, high = (f(s["rss"] for s in samples) / 2**20 for f in (min, max))
    print(
        f"  server RSS: first {window:.0f} s after warm-up {first / 2**20:.1f} MiB, last "
        f"{window:.0f} s {last / 2**20:.1f} MiB, drift {drift:+.1%}; min {low:.1f}, "
        f"max {high:.1f} MiB"
    )
    if left_files or left_children > 1 or sampler.errors:
        print(f"  left: files {left_files}, children {left_children}; errors {sampler.errors[:5]}")
    if args.json:
        args.json.write_text(json.dumps({"checks": checks, "samples": samples}, indent=1))
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the run (10)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--pause", type=float, default=0.05, help="after a refusal (0.05 s)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", type=Path, help="also write the samples here")
    args = parser.parse_args(argv)
    if not (args.corpus / "files.json").is_file():
        print(
            f"soak needs the corpus of real PDFs at {args.corpus}, or --corpus DIR", file=sys.stderr
        )
        return 2
    if any(key.startswith("PDFPOOL_") for key in os.environ):
        print("unset the PDFPOOL_* variables: the example would read them", file=sys.stderr)
        return 2
    return 0 if soak(args, load_corpus(args.corpus)) else 1


if __name__ == "__main__":
    sys.exit(main())
