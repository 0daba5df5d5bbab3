"""What the door costs a request it does not refuse, and what its refusal costs, in one run.

``python benchmarks/bench_door.py [--quick]`` sets up the example project's settings (with the
load benchmark's URLs) in this process and times POSTs of a few hundred bytes to a view that is
not pooled (``/bench/plain/``), the door on against off: under WSGI through Django's test client
(``AdmissionMiddleware`` resolves the URL), under ASGI through ``PdfPoolDoor`` before a no-op
app and through the example's stack. Then an upload refused from its headers (the pool closed)
through ``PdfPoolDoor`` before a no-op app, against the no-op app alone. Each figure is the
best of rounds that take the variants in turn; microseconds on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
BODY = b"x" * 512


def setup() -> None:
    """The example's settings and URLs, with the benchmark's, in this process."""
    sys.path[:0] = [str(ROOT), str(EXAMPLE)]
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.variants_settings"
    os.environ.setdefault("DEMO_STATE_DIR", tempfile.mkdtemp(prefix="pdfpool-bench-door-"))
    os.environ["DEMO_LOG_LEVEL"] = "WARNING"
    import django

    django.setup()


def timed(call: Callable[[], Any], number: int) -> float:
    """Microseconds per call over ``number`` calls."""
    began = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - began) / number * 1e6


def door(on: bool) -> Any:
    """Settings with the door on or off (``override_settings`` clears PDFPOOL's cache)."""
    from django.conf import settings
    from django.test import override_settings

    return override_settings(PDFPOOL={**settings.PDFPOOL, "DOOR": on})


Config = tuple[str, bool, Callable[[], Any]]  # (name, the door on, the call)


def interleaved(configs: list[Config], number: int, count: int) -> dict[str, float]:
    """``rounds`` for whole requests, each under its door setting (switched off the clock):
    the best of ``count`` rounds."""
    for _, on, call in configs:  # warm up
        with door(on):
            timed(call, max(1, number // 10))
    samples: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    for _ in range(count):
        for name, on, call in configs:
            with door(on):
                samples[name].append(timed(call, number))
    return {name: min(values) for name, values in samples.items()}


def wsgi_figures(number: int, count: int) -> dict[str, float]:
    """Whole requests through Django's test client (WSGI), the door on and off."""
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")

    def post() -> None:
        response = client.post("/bench/plain/", BODY, content_type="application/octet-stream")
        assert response.status_code == 200, response.status_code

    configs = [(f"WSGI POST, door {'on' if on else 'off'}", on, post) for on in (True, False)]
    return interleaved(configs, number, count)


async def asgi_request(app: Any, method: str, path: str, body: bytes, pdf: bool = False) -> int:
    """One request through an ASGI app in process (``pdf``: a raw PDF upload); its status."""
    headers = [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]
    headers += [(b"content-type", b"application/pdf")] if pdf else []
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    given = False
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect: Django's listener is cancelled
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    return statuses[0]


async def noop(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app that answers at once without reading the body: what the door's own cost
    is measured against, with nothing else in the way."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def asgi_figures(number: int, count: int) -> dict[str, float]:
    """Requests in process through ``PdfPoolDoor`` in front of a no-op app (the door's
    own cost), and through the example's whole stack, the door on and off, against the
    same without the door."""
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor, PoolLifespan

    alone: Any = get_asgi_application()
    apps = {
        "PdfPoolDoor before a no-op app": (PdfPoolDoor(noop), "the no-op app alone", noop),
        "example's stack": (PdfPoolDoor(PoolLifespan(alone)), "Django's handler alone", alone),
    }
    loop = asyncio.new_event_loop()

    def calling(app: Any, method: str) -> Callable[[], None]:
        body = BODY if method == "POST" else b""

        async def batch() -> None:  # one loop entry for ``number`` requests
            for _ in range(number):
                status = await asgi_request(app, method, "/bench/plain/", body)
                assert status == 200, status

        return lambda: loop.run_until_complete(batch())

    configs: list[Config] = []
    for label, (door_app, without, app) in apps.items():
        for on in (True, False):
            configs.append(
                (f"ASGI POST, {label}, door {'on' if on else 'off'}", on, calling(door_app, "POST"))
            )
        configs.append((f"ASGI POST, {without}", True, calling(app, "POST")))
    try:
        found = interleaved(configs, 1, count)
    finally:
        loop.close()
    return {name: us / number for name, us in found.items()}


def refusal_figure(number: int, count: int) -> tuple[float, float]:
    """An upload to the pooled ``/api/extract/`` refused from its headers (the pool closed:
    503 before the body) through ``PdfPoolDoor`` before a no-op app, against the no-op app
    alone: the door's whole refusal, record to answer. Closes this process's pool."""
    from django_pdfpool import PdfPoolDoor, get_pool

    get_pool().close()
    door = PdfPoolDoor(noop)
    loop = asyncio.new_event_loop()

    def calling(app: Any, status: int) -> Callable[[], None]:
        async def batch() -> None:
            for _ in range(number):
                got = await asgi_request(app, "POST", "/api/extract/", BODY, pdf=True)
                assert got == status, got

        return lambda: loop.run_until_complete(batch())

    configs: list[Config] = [
        ("refused", True, calling(door, 503)),
        ("alone", True, calling(noop, 200)),
    ]
    try:
        found = interleaved(configs, 1, count)
    finally:
        loop.close()
    return found["refused"] / number, found["alone"] / number


def report(whole: dict[str, float]) -> list[str]:
    """The Markdown table: requests with the door on against off."""
    lines = [
        "| POST to a view that is not pooled | door on µs | door off µs | without it µs "
        "| on - off µs | on / off |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows: list[tuple[str, str | None]] = [
        ("WSGI POST", None),
        ("ASGI POST, PdfPoolDoor before a no-op app", "the no-op app alone"),
        ("ASGI POST, example's stack", "Django's handler alone"),
    ]
    for name, without in rows:
        on, off = whole[f"{name}, door on"], whole[f"{name}, door off"]
        alone = "" if without is None else f"{whole[f'ASGI POST, {without}']:,.1f}"
        lines.append(
            f"| {name} | {on:,.1f} | {off:,.1f} | {alone} | {on - off:+,.1f} | {on / off:.3f}x |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run")
    args = parser.parse_args(argv)
    rounds_, requests = (3, 100) if args.quick else (25, 100)
    setup()
    load = os.getloadavg()
    print(f"python benchmarks/bench_door.py {' '.join(argv or sys.argv[1:])}".strip())
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} before", flush=True)
    whole = {**wsgi_figures(requests, rounds_), **asgi_figures(requests, rounds_)}
    print("\n".join(report(whole)))
    refused, alone = refusal_figure(requests, rounds_)
    print(
        f"\nan upload refused from its headers (503, pool closed), PdfPoolDoor before a no-op "
        f"app: {refused:,.1f} µs against {alone:,.1f} µs for the no-op app alone "
        f"({refused / alone:.2f}x)"
    )
    print(f"\nload average {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
