"""Extraction cost over the corpus: in-process pypdf, cold child, warm child, pypdfium2 (warm).

    .venv/bin/python benchmarks/bench_extract.py [CORPUS_DIR] [--repeat N]

Per file: the median wall time of N runs of each mode as the caller sees it (for a child:
from `await extract()` to its return), the ratio to in-process pypdf, and each child's peak
RSS. Modes alternate run by run, and every run waits until a spare is ready (so a warm run
finds one, and no spare is starting up beside any measurement). The median row is over the
typical files (readable, under a second in process); the others are listed below it.
In-process runs come after a warm-up pass, as in a long-lived server; pypdf logs nothing
in either (its warnings cost time on the heavy file).
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
import time
from pathlib import Path

from pypdf import PdfReader

from django_pdfpool import extraction
from django_pdfpool.extraction import ExtractionError, extract

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"timeout": 60.0, "memory_limit": 1 << 30}
HEAVY = 1.0  # seconds in process: beyond this a file is not "typical"


def in_process(path: Path) -> None:
    """What a naive view would do: pypdf in the server's own process."""
    reader = PdfReader(io.BytesIO(path.read_bytes()))
    [page.extract_text() for page in reader.pages]
    _ = reader.metadata


async def settle() -> None:
    """Wait until a spare is ready: no spare is starting up beside the next measurement."""
    while not extraction.spare_pids():
        await asyncio.sleep(0.005)


async def child(path: Path, warm: bool, engine: str = "pypdf") -> tuple[float, int | None]:
    start = time.perf_counter()
    try:
        result = await extract(path, warm=warm, engine=engine, **LIMITS)
        rss = result.peak_rss
    except ExtractionError as error:
        rss = error.peak_rss
    return time.perf_counter() - start, rss


def timed(fn, path: Path) -> float:
    start = time.perf_counter()
    with contextlib.suppress(Exception):  # encrypted or damaged: the failure is timed
        fn(path)
    return time.perf_counter() - start


async def bench(corpus: Path, repeat: int) -> list[dict]:
    """Modes alternate run by run, so that noise from other processes hits them alike."""
    entries = json.loads((corpus / "files.json").read_text())["data"]
    paths = [corpus / entry["path"] for entry in entries if (corpus / entry["path"]).exists()]
    for path in paths:  # warm up in-process pypdf (lazy imports, caches)
        timed(in_process, path)
    extraction.configure(spares=1)
    extraction.prewarm()
    rows = []
    # pypdf's spares do not preload pypdfium2 until a pypdfium2 job asks: pdfium runs last.
    for engines in (("in", "cold", "warm"), ("pdfium",)):
        for index, path in enumerate(paths):
            if engines[0] == "in":
                once = timed(in_process, path)
                rows.append({"file": path.name, "heavy": once >= HEAVY})
            row = rows[index]
            runs: dict[str, list] = {mode: [] for mode in engines}
            for _ in range(max(1, repeat // 2) if row["heavy"] else repeat):
                for mode in engines:
                    await settle()
                    if mode == "in":
                        runs[mode].append((timed(in_process, path), None))
                    else:
                        runs[mode].append(
                            await child(
                                path, mode != "cold", "pypdfium2" if mode == "pdfium" else "pypdf"
                            )
                        )
            for mode, results in runs.items():
                row[mode] = statistics.median(t for t, _ in results)
                row[mode + "_rss"] = max((r for _, r in results if r is not None), default=None)
        print(f"  {'/'.join(engines)}: done", file=sys.stderr, flush=True)
    extraction.shutdown()
    for row, path in zip(rows, paths, strict=True):
        try:
            in_process(path)
            row["typical"] = not row["heavy"]
            if row["heavy"]:
                row["note"] = "heavy"
        except Exception as error:
            row["typical"], row["note"] = False, type(error).__name__
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def mb(rss: int | None) -> str:
    return "-" if rss is None else f"{rss / 2**20:.0f}"


def table(rows: list[dict]) -> str:
    head = (
        "| file | in-process ms | cold ms (x) | warm ms (x) | pdfium warm ms (x) "
        "| RSS MB cold / warm / pdfium |\n|---|---:|---:|---:|---:|---:|"
    )
    lines = [head]

    def line(row: dict, name: str) -> str:
        cells = [f"{ms(row[m])} ({row[m] / row['in']:.2f})" for m in ("cold", "warm", "pdfium")]
        rss = " / ".join(mb(row.get(m + "_rss")) for m in ("cold", "warm", "pdfium"))
        return f"| {name} | {ms(row['in'])} | " + " | ".join(cells) + f" | {rss} |"

    typical = [row for row in rows if row["typical"]]
    lines += [line(row, row["file"]) for row in typical]
    med = {
        m: statistics.median(row[m] for row in typical) for m in ("in", "cold", "warm", "pdfium")
    }
    ratios = {
        m: statistics.median(row[m] / row["in"] for row in typical)
        for m in ("cold", "warm", "pdfium")
    }
    lines.append(
        f"| **median of {len(typical)} typical files** | **{ms(med['in'])}** | "
        + " | ".join(f"**{ms(med[m])} ({ratios[m]:.2f})**" for m in ("cold", "warm", "pdfium"))
        + " | |"
    )
    lines += [line(row, f"{row['file']} ({row['note']})") for row in rows if not row["typical"]]
    return (
        "\n".join(lines) + "\n\n(x) = ratio to in-process pypdf, per file; median row: "
        "median times, and the median of the per-file ratios."
    )


def main() -> None:
    args = sys.argv[1:]
    repeat = 5
    if "--repeat" in args:
        repeat = int(args.pop(args.index("--repeat") + 1))
        args.remove("--repeat")
    corpus = Path(args[0]) if args else ROOT.parent / "shared" / "corpus"
    if not (corpus / "files.json").exists():
        sys.exit(f"no corpus at {corpus}")
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # same quiet pypdf as in the child
    started = time.perf_counter()
    load = os.getloadavg()[0]
    rows = asyncio.run(bench(corpus, repeat))
    print(table(rows))
    print(
        f"\n{repeat} runs per file and mode ({max(1, repeat // 2)} for heavy files), "
        f"{time.perf_counter() - started:.0f} s in all; load average {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs."
    )


if __name__ == "__main__":
    main()
