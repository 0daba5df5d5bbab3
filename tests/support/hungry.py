"""An engine whose child grows by the MiB its document names (``%PDF-hungry <MiB>``) before
answering: a job whose peak resident set is known."""

from __future__ import annotations

ENGINE = "tests.support.hungry:grow"


def grow(data: bytes) -> list[str]:
    mib = int(data.split()[1]) if data.startswith(b"%PDF-hungry ") else 0
    held = bytearray(mib << 20)
    for at in range(0, len(held), 4096):  # touched: resident, not just reserved
        held[at] = 1
    return [f"grew {mib} MiB"]


def document(mib: int, tag: str = "") -> bytes:
    return f"%PDF-hungry {mib} {tag}".encode()
