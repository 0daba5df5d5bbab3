"""What the door adds to a request that is not to a pooled view: one URL resolution.

``python benchmarks/bench_door.py [--quick]`` sets up the example project's settings (with
the load benchmark's URLs: ``benchmarks.variants_settings``) in this process, then times:

1. ``resolve()`` and the door's ``pooled_view()`` of paths in the example's URLconf
   (``demo.urls``): the pooled ``/api/extract/``, two that are not pooled (the admin's
   login page, a job-state URL), one that resolves to nothing (a 404) and one that only
   the admin's catch-all view matches (every admin pattern tried first);
2. whole POSTs to a plain view that is not pooled (``/bench/plain/``, a few hundred bytes
   of body) with the door on and off: under WSGI through Django's test client
   (``AdmissionMiddleware`` resolves), and under ASGI in process, through the example's
   stack (``PdfPoolDoor(PoolLifespan(get_asgi_application()))``: the door resolves
   before Django's handler resolves again), against Django's handler alone;
3. the same with a GET (the door looks at POSTs only: nothing to pay);
4. an upload to the pooled ``/api/extract/`` refused from its headers (the pool closed),
   through ``PdfPoolDoor`` before a no-op app: the door's whole refusal.

Each figure is the best of rounds that take the variants in turn (the machine's other work
only ever adds time, and falls on all of them alike); the ratios are against the same
request with the door off, in the same run. Microseconds on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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
JOB_STATE = "/api/jobs/" + "0" * 64 + "/"


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


def rounds(variants: dict[str, Callable[[], Any]], number: int, count: int) -> dict[str, float]:
    """The best of ``count`` rounds of each variant's time per call, taken in turn."""
    for call in variants.values():  # warm up: caches, imports, the first resolver
        timed(call, max(1, number // 10))
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(count):
        for name, call in variants.items():
            samples[name].append(timed(call, number))
    return {name: min(values) for name, values in samples.items()}


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


def resolver_figures(number: int, count: int) -> dict[str, float]:
    """``resolve()`` and ``pooled_view()`` of paths in the example's URLconf."""
    from django.urls import Resolver404, resolve

    from django_pdfpool.record import pooled_view

    def resolving(path: str, urlconf: str) -> Callable[[], Any]:
        def call() -> Any:
            try:
                return resolve(path, urlconf)
            except Resolver404:
                return None

        return call

    paths = {
        "pooled /api/extract/": "/api/extract/",
        "not pooled /admin/login/": "/admin/login/",
        "not pooled /api/jobs/<sha256>/": JOB_STATE,
        "no such page (404)": "/no/such/page/",
        "no such admin page (the admin's catch-all)": "/admin/no/such/page/",
        "not pooled /bench/plain/ (the benchmark's URLconf, below)": "/bench/plain/",
    }
    assert pooled_view("/api/extract/", "demo.urls") is not None
    assert pooled_view("/admin/login/", "demo.urls") is None
    variants: dict[str, Callable[[], Any]] = {}
    for label, path in paths.items():
        urlconf = "benchmarks.variants" if path.startswith("/bench/") else "demo.urls"
        variants[f"resolve(): {label}"] = resolving(path, urlconf)
        variants[f"pooled_view(): {label}"] = functools.partial(pooled_view, path, urlconf)
    return rounds(variants, number, count)


def wsgi_figures(number: int, count: int) -> dict[str, float]:
    """Whole requests through Django's test client (WSGI), the door on and off."""
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")

    def post() -> None:
        response = client.post("/bench/plain/", BODY, content_type="application/octet-stream")
        assert response.status_code == 200, response.status_code

    def get() -> None:
        assert client.get("/bench/plain/").status_code == 200

    configs = [
        (f"WSGI {method}, door {'on' if on else 'off'}", on, call)
        for method, call in (("POST", post), ("GET", get))
        for on in (True, False)
    ]
    return interleaved(configs, number, count)


async def asgi_request(app: Any, method: str, path: str, body: bytes) -> int:
    """One request through an ASGI app in process; its status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
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
    for method in ("POST", "GET"):
        for label, (door_app, without, app) in apps.items():
            for on in (True, False):
                name = f"ASGI {method}, {label}, door {'on' if on else 'off'}"
                configs.append((name, on, calling(door_app, method)))
            configs.append((f"ASGI {method}, {without}", True, calling(app, method)))
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
                got = await asgi_request(app, "POST", "/api/extract/", BODY)
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


def report(resolver: dict[str, float], whole: dict[str, float]) -> list[str]:
    """The Markdown tables: calls as shares of a WSGI POST, requests door on against off."""
    base = whole["WSGI POST, door off"]
    lines = ["| call | µs per call | share of a WSGI POST (door off) |", "|---|---:|---:|"]
    lines += [f"| {name} | {us:.1f} | {us / base:.1%} |" for name, us in resolver.items()]
    lines += [
        "",
        "| request to a view that is not pooled | door on µs | door off µs | without it µs "
        "| on - off µs | on / off |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows: list[tuple[str, str | None]] = [("WSGI POST", None), ("WSGI GET", None)]
    for method in ("POST", "GET"):
        rows.append((f"ASGI {method}, PdfPoolDoor before a no-op app", "the no-op app alone"))
        rows.append((f"ASGI {method}, example's stack", "Django's handler alone"))
    for name, without in rows:
        on, off = whole[f"{name}, door on"], whole[f"{name}, door off"]
        request = name.split(",")[0]  # "ASGI POST"
        alone = "" if without is None else f"{whole[f'{request}, {without}']:,.1f}"
        lines.append(
            f"| {name} | {on:,.1f} | {off:,.1f} | {alone} | {on - off:+,.1f} | {on / off:.3f}x |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run")
    args = parser.parse_args(argv)
    rounds_, micro, requests = (3, 2000, 100) if args.quick else (25, 20000, 100)
    setup()
    load = os.getloadavg()
    print(f"python benchmarks/bench_door.py {' '.join(argv or sys.argv[1:])}".strip())
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} before", flush=True)
    resolver = resolver_figures(micro, rounds_)
    whole = {**wsgi_figures(requests, rounds_), **asgi_figures(requests, rounds_)}
    print("\n".join(report(resolver, whole)))
    refused, alone = refusal_figure(requests, rounds_)
    print(
        f"\nan upload refused from its headers (503, pool closed), PdfPoolDoor before a no-op "
        f"app: {refused:,.1f} µs against {alone:,.1f} µs for the no-op app alone"
    )
    print(f"\nload average {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
