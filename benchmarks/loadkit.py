"""What the load benchmarks share (bench_load.py, soak.py): the corpus and the mix of
uploads, the probes (health polls and the process tree's memory, each in a process of its
own), the CPU accounting of a server's process tree, and percentiles; and the verdict
words every benchmark prints against a target (bench_extract.py too).

``python benchmarks/loadkit.py health|tree ...`` runs one probe (bench_load starts them).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
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
    # BENCH_PROBE_SPLIT=FILE: also (sent, latency, ms to the application, ms in it, ms the
    # probe itself waited runnable for a CPU, ms of CPU it used) per poll, from the headers the
    # benchmark's wrapper adds (variants_asgi.py) and the probe's own schedstat
    split: list[tuple[float, ...]] | None = [] if os.environ.get("BENCH_PROBE_SPLIT") else None
    with httpx.Client(timeout=30) as http, open("/proc/thread-self/schedstat") as stat:
        http.get(url)  # connect before the clock starts
        time.sleep(max(0.0, start - time.time()))
        due = time.monotonic()
        end = due + seconds
        while time.monotonic() < end:
            stat.seek(0)
            ran, waited = (int(v) for v in stat.read().split()[:2])
            began, sent = time.perf_counter(), time.time()
            try:
                answer = http.get(url)
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append((time.perf_counter() - began) * 1000 if ok else None)
            stat.seek(0)
            ran_after, waited_after = (int(v) for v in stat.read().split()[:2])
            if ok and split is not None and "bench-at" in answer.headers:
                at, app = float(answer.headers["bench-at"]), float(answer.headers["bench-app-ms"])
                own = ((waited_after - waited) / 1e6, (ran_after - ran) / 1e6)
                split.append((sent, latencies[-1], (at - sent) * 1000, app, *own))
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))
    if split is not None:
        with open(os.environ["BENCH_PROBE_SPLIT"], "a") as out:
            out.write(json.dumps(split) + "\n")
    print(json.dumps(latencies))


BESIDE_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n"
BESIDE_ANSWER += b'{"ok": true}'


def serve_beside() -> None:
    """A trivial HTTP/1.1 server (asyncio, keep-alive, one fixed answer) until stdin closes;
    its port first on stdout. Probed during the load, it is what any request gets on this
    machine under it, with no Django, uvicorn or pool: the floor of the health figures."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(BESIDE_ANSWER)
                await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        server.close()

    asyncio.run(main())


def beside() -> tuple[subprocess.Popen[str], str]:
    """Start ``serve_beside`` in a session of its own (a service of its own, to the
    scheduler's autogroup); stop it by closing its stdin. Its URL with it."""
    process = subprocess.Popen(
        [sys.executable, __file__, "beside"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    return process, f"http://127.0.0.1:{int(process.stdout.readline())}/"


def probe_tree(pid: int, interval: float) -> None:
    """Sample the process tree of ``pid`` every ``interval`` s until stdin closes; print the
    samples as JSON: [wall time, tree RSS, server RSS, children, largest child RSS].

    A descendant still running the server's command line is a child between fork and exec:
    its RSS is the server's own pages (subprocess uses vfork), so it is not counted."""
    import psutil  # type: ignore[import-untyped]

    stop = threading.Event()

    def until_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_eof, daemon=True).start()
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


def run_probe(kind: str, *args: Any, fifo: bool = False) -> subprocess.Popen[str]:
    """Start a probe (``health`` or ``tree``); its JSON comes on stdout at the end. With
    ``fifo``, at ``SCHED_FIFO`` (set before its imports are done, so before its first poll)
    where this process may (root, CAP_SYS_NICE): see ``probes_first``."""
    process = subprocess.Popen(
        [sys.executable, __file__, kind, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if fifo:
        with contextlib.suppress(PermissionError):
            os.sched_setscheduler(process.pid, os.SCHED_FIFO, os.sched_param(PROBE_PRIORITY))
    return process


PROBE_PRIORITY = 2  # SCHED_FIFO's lowest but one: above every ordinary process


def probes_first() -> bool:
    """Whether probes can run at ``SCHED_FIFO`` here. A probe shares the machine with the
    load it measures; at the ordinary priority its own waits for a CPU (up to 36 ms in one
    poll, docs/performance.md) count as the server's. Clients of a real server are elsewhere."""
    probe = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        os.sched_setscheduler(probe.pid, os.SCHED_FIFO, os.sched_param(PROBE_PRIORITY))
        return True
    except PermissionError:
        return False
    finally:
        probe.communicate(b"")


# --- CPU and processes --------------------------------------------------------------------


@dataclass
class CpuReading:
    """CPU seconds so far: the machine's busy time, the server's own, its descendants'
    (each live one's own and what it reaped, plus what the server reaped: a child's time
    moves to its parent's when it is reaped, so the sum only grows), and this process's
    (the load generator)."""

    at: float
    machine: float
    server: float
    children: float
    load: float

    @classmethod
    def take(cls, pid: int) -> CpuReading:
        import psutil

        server = psutil.Process(pid)
        machine = psutil.cpu_times()
        own = server.cpu_times()
        children = own.children_user + own.children_system
        for child in server.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                times = child.cpu_times()
                children += times.user + times.system + times.children_user
                children += times.children_system
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(
            at=time.monotonic(),
            machine=sum(machine) - machine.idle - machine.iowait,
            server=own.user + own.system,
            children=children,
            load=usage.ru_utime + usage.ru_stime,
        )

    def until(self, end: CpuReading) -> dict[str, float]:
        """CPU seconds spent from this reading to ``end``, by whom, and the seconds."""
        spent = {
            "server": end.server - self.server,
            "children": end.children - self.children,
            "load": end.load - self.load,
        }
        spent["other"] = end.machine - self.machine - sum(spent.values())
        spent["seconds"] = end.at - self.at
        return spent


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


def verdict(met: bool | None) -> str:
    """A target's status as the benchmarks print it; None: the run gave nothing to compare
    (no sample, or a figure the benchmark cannot hold to its target)."""
    return "n/a   " if met is None else "MET   " if met else "MISSED"


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
        # BENCH_PROBE_NICE=N (root only below 0): the probe's own wake-ups out of its figures
        if nice := os.environ.get("BENCH_PROBE_NICE"):
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))
        probe_health(rest[0], float(rest[1]), float(rest[2]), float(rest[3]))
    elif kind == "beside":
        serve_beside()
    else:
        probe_tree(int(rest[0]), float(rest[1]))
