"""Twelve sharers of a text bomb on the example server: the server's memory stays within a
bound."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from django_pdfpool.sandbox.wire import DEFAULT_MAX_TEXT_BYTES, answer_limit
from tests.support import pdfs

BOMB_CALLERS = 12


BOMB_PEAK_BOUND = 96 << 20  # the server's peak resident set over idle, 12 sharers of the bomb


BOMB_AFTER_BOUND = 32 << 20  # what it may keep once every answer is sent


def vm(pid: int, field: bytes) -> int:
    from tests.support.procs import status_kb

    value = status_kb(pid, field)
    assert value is not None, field
    return value * 1024


def test_twelve_sharers_of_a_text_bomb_cost_the_example_server_a_bound(tmp_path):
    """The example's API under uvicorn: 12 callers upload a few KB of text bomb at once (one
    job, shared). Each answer is its 8 MiB of text once, as UTF-8, streamed: the server's
    peak RSS grows by at most 96 MiB over idle, and gives most of it back after. The bomb
    shows 24 MB of text, 3 times the cap: the server only ever sees the cut answer, whatever
    the bomb's size (the 64 MB bomb's child is tests/sandbox/test_text_cap.py's)."""
    import httpx

    from tests.e2e.test_example import SCRIPT, prepare, serve

    data = pdfs.text_bomb(6_000_000)
    assert len(data) < 20_000
    prepare(tmp_path)
    with serve(tmp_path, TIMEOUT=120, QUEUE=BOMB_CALLERS) as server:  # the door admits all
        with httpx.Client(timeout=60) as client:  # imports and caches paid before idle
            files = {"file": ("warm.pdf", pdfs.simple(["warm"]), "application/pdf")}
            warm = client.post(server.url + "/api/extract/", files=files, headers=SCRIPT)
            assert warm.status_code == 200, warm.text
        idle = vm(server.pid, b"VmRSS")
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS

        async def one(client: httpx.AsyncClient) -> tuple[int, int, bytes]:
            files = {"file": ("bomb.pdf", data, "application/pdf")}
            async with client.stream(
                "POST", server.url + "/api/extract/", files=files, headers=SCRIPT
            ) as response:
                size, head = 0, b""
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    head = head or chunk[:200]
                return response.status_code, size, head

        async def all_of_them():
            async with httpx.AsyncClient(timeout=180) as client:
                return await asyncio.gather(*(one(client) for _ in range(BOMB_CALLERS)))

        answers = asyncio.run(all_of_them())
        peak = vm(server.pid, b"VmHWM") - idle
        after, given_back = vm(server.pid, b"VmRSS") - idle, time.monotonic() + 30
        while after > BOMB_AFTER_BOUND and time.monotonic() < given_back:  # poll, no sleep
            time.sleep(0.05)  # the last responses' buffers are released soon after
            after = vm(server.pid, b"VmRSS") - idle
    print(f"idle {idle >> 20} MiB, peak +{peak / 2**20:.1f} MiB, after +{after / 2**20:.1f} MiB")
    assert [status for status, _, _ in answers] == [200] * BOMB_CALLERS
    sizes = {size for _, size, _ in answers}
    assert len(sizes) == 1 and DEFAULT_MAX_TEXT_BYTES <= sizes.pop() <= answer_limit(
        DEFAULT_MAX_TEXT_BYTES
    )  # the text once, as UTF-8 (as \\u escapes it would be 3 times as long)
    assert all(b"\\u" not in head for _, _, head in answers)
    assert peak <= BOMB_PEAK_BOUND, peak
    assert after <= BOMB_AFTER_BOUND, after
