"""The memory envelope from outside: distinct memory-hungry uploads (each grows its child to
MEMORY_LIMIT) through the example project as ``make demo`` serves it, the process tree's RSS
sampled every few ms. Prints the server's idle RSS, the tree's peak, the bound (idle + SLOTS x
MEMORY_LIMIT + 64 MiB) and the most large job children (RSS over MEMORY_LIMIT / 2) seen at once.

``python tools/memory_envelope.py [--uploads 120] [--slots 2] [--memory-mib 256]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import pdfs  # noqa: E402
from tests.support.servers import uvicorn  # noqa: E402

MiB = 1 << 20
MARGIN = 64 * MiB


def sample(pid: int, large: int, stop: threading.Event, out: dict[str, int]) -> None:
    """Until ``stop``: the tree's RSS (a child between fork and exec, still running the
    server's command line, holds the server's own pages: not counted) and large children."""
    server = psutil.Process(pid)
    own = server.cmdline()
    while not stop.is_set():
        tree, big = server.memory_info().rss, 0
        for child in server.children(recursive=True):
            try:
                if child.cmdline() == own:
                    continue
                rss = child.memory_info().rss
            except psutil.Error:  # gone meanwhile
                continue
            tree += rss
            big += rss > large
        out["peak"], out["most_large"] = max(out["peak"], tree), max(out["most_large"], big)
        out["samples"] += 1
        stop.wait(0.005)


async def offer(url: str, uploads: int, clients: int) -> dict[int, int]:
    """``uploads`` distinct hungry PDFs, ``clients`` at a time; the answers' statuses."""
    hungry = pdfs.many_streams()
    statuses: dict[int, int] = {}
    numbers = iter(range(uploads))

    async def client(address: str) -> None:  # one caller each: the example's is the address
        transport = httpx.AsyncHTTPTransport(local_address=address)
        async with httpx.AsyncClient(transport=transport, timeout=300) as http:
            for n in numbers:
                data = hungry + b"%% upload %d\n" % n  # after %%EOF: distinct, same work
                files = {"file": (f"hungry-{n}.pdf", data, "application/pdf")}
                headers = {"accept": "application/json", "x-requested-with": "tool"}
                answer = await http.post(url + "/api/extract/", files=files, headers=headers)
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    await asyncio.gather(*(client(f"127.0.9.{i + 1}") for i in range(clients)))
    return statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=120)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--memory-mib", type=int, default=256)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    limit = args.memory_mib * MiB
    with tempfile.TemporaryDirectory(prefix="pdfpool-envelope-") as state:
        env = {
            "DEMO_STATE_DIR": state,
            "DJANGO_SETTINGS_MODULE": "demo.settings",
            "PDFPOOL_SLOTS": str(args.slots),
            "PDFPOOL_MEMORY_LIMIT": str(limit),
            "PDFPOOL_QUEUE": str(args.clients),
            "PDFPOOL_WAIT": "300",
        }
        migrate = [sys.executable, "manage.py", "migrate", "--noinput"]
        cwd = ROOT / "example_project"
        subprocess.run(migrate, cwd=cwd, env={**os.environ, **env}, check=True, capture_output=True)
        with uvicorn("demo.asgi:application", env=env, cwd=cwd) as server:
            warm = httpx.post(
                server.url + "/api/extract/",
                files={"file": ("warm.pdf", pdfs.simple(["warm"]), "application/pdf")},
                headers={"accept": "application/json", "x-requested-with": "tool"},
                timeout=60,
            )
            assert warm.status_code == 200, warm.text
            time.sleep(2)  # the warm template and its ready child settle
            idle = psutil.Process(server.pid).memory_info().rss
            figures = {"peak": 0, "most_large": 0, "samples": 0}
            stop = threading.Event()
            sampler = threading.Thread(target=sample, args=(server.pid, limit // 2, stop, figures))
            sampler.start()
            began = time.monotonic()
            try:
                statuses = asyncio.run(offer(server.url, args.uploads, args.clients))
            finally:
                stop.set()
                sampler.join()
            took = time.monotonic() - began
    bound = idle + args.slots * limit + MARGIN
    print(f"{args.uploads} uploads ({args.clients} clients) in {took:.0f} s, answers {statuses}")
    print(f"server idle RSS {idle / MiB:.0f} MiB; tree peak {figures['peak'] / MiB:.0f} MiB")
    print(f"bound idle + {args.slots} x {args.memory_mib} MiB + 64 MiB = {bound / MiB:.0f} MiB")
    print(f"most large children at once {figures['most_large']} ({figures['samples']} samples)")
    met = figures["peak"] <= bound and figures["most_large"] <= args.slots
    print("MET" if met else "NOT MET")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
