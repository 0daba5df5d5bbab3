"""What the benchmarks share: the corpus and the mix of uploads, the probes (health polls and
the process trees' memory, each a process of its own: ``python benchmarks/loadkit.py
health|tree ...``), percentiles, and the table of ratios bench_load.py prints."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus"

HEAVY = "009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
HOT = (HEAVY, "004-pdflatex-4-pages/pdflatex-4-pages.pdf", "026-latex-multicolumn/multicolumn.pdf")
IDENTICAL_SHARE = 0.5
BOUNDARY = "pdfpool-bench-boundary"
_TAIL = f"\r\n--{BOUNDARY}--\r\n".encode()
MiB = 1 << 20


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
    return head + data + _TAIL


def sha256_of_form(body: bytes) -> str:
    """The SHA-256 (hex) of the file in a body ``multipart`` built: what a client declares."""
    start = body.index(b"\r\n\r\n") + 4
    return hashlib.sha256(memoryview(body)[start : len(body) - len(_TAIL)]).hexdigest()


class Mix:
    """Half identical uploads (one of HOT, unchanged), half distinct (any corpus file with a
    unique comment after %%EOF: readers ignore it, its SHA-256 is new)."""

    def __init__(self, corpus: dict[str, bytes]) -> None:
        self.corpus = corpus
        self.names = sorted(corpus)
        self.hot = {name: multipart(name, corpus[name]) for name in HOT}
        self._serial = 0

    def pick(self, rng: random.Random) -> tuple[str, str, bytes]:
        """(identical or distinct, the corpus file, the multipart body)."""
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


def probe_tree(pids: list[int], interval: float) -> None:
    """Sample the process trees of ``pids`` (the server's first) every ``interval`` s until
    stdin closes; print the samples as JSON: [wall time, the trees' RSS, the server's RSS].
    A descendant still running the server's command line is between fork and exec: its
    pages are the server's (subprocess uses vfork), so it is not counted."""
    import psutil  # type: ignore[import-untyped]

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    server, *others = (psutil.Process(pid) for pid in pids)
    own, samples = server.cmdline(), []
    while not stop.is_set():
        try:
            tree = server_rss = server.memory_info().rss
            descendants = server.children(recursive=True)
            for other in others:
                descendants += [other, *other.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for child in descendants:
            try:
                if child.cmdline() != own:
                    tree += child.memory_info().rss
            except psutil.Error:  # gone meanwhile
                continue
        samples.append((time.time(), tree, server_rss))
        stop.wait(interval)
    print(json.dumps(samples))


def run_probe(kind: str, *args: Any) -> subprocess.Popen[str]:
    """Start a probe (``health`` or ``tree``); its JSON comes on stdout at the end."""
    return subprocess.Popen(
        [sys.executable, __file__, kind, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def outlived(processes: list[Any]) -> list[str]:
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


# --- figures ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def machine() -> str:
    """The machine in one line, with its load average now."""
    load = os.getloadavg()
    return (
        f"Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(
    results: dict[str, dict[str, Any]], rows: list[tuple[str, str, str]], base: str
) -> list[str]:
    """A Markdown table: one column per variant, then each other's ratio to ``base``."""
    names = list(results)
    others = [name for name in names if name != base] if base in names else []
    head = ["metric", *names, *(f"{name} / {base}" for name in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    for label, key, fmt in rows:
        row = [label, *(cell(results[name][key], fmt) for name in names)]
        for name in others:
            was, value = results[base][key], results[name][key]
            ratio = value / was if isinstance(value, int | float) and was else None
            row.append(cell(ratio, "{:.2f}x"))
        lines.append("| " + " | ".join(row) + " |")
    return lines


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "health":
        probe_health(rest[0], float(rest[1]), float(rest[2]), float(rest[3]))
    else:
        probe_tree([int(pid) for pid in rest[0].split(",")], float(rest[1]))
