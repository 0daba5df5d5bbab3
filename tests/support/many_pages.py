"""An engine whose child writes, past the cap an honest child keeps to, an answer of
``PAGES`` two-letter pages (9.5 MiB): what code run by a hostile PDF could send."""

from __future__ import annotations

import hashlib
import os

ENGINE = "tests.support.many_pages:many_pages"
PAGES = 2_000_000


def hostile_answer(data: bytes) -> bytes:
    """The answer, in the wire's format, with every page (MAX_ANSWER_PAGES lifted)."""
    from django_pdfpool.sandbox import wire
    from django_pdfpool.sandbox.wire import Extracted, encode_answer

    cap, wire.MAX_ANSWER_PAGES = getattr(wire, "MAX_ANSWER_PAGES", 0), PAGES
    try:
        digest = hashlib.sha256(data).hexdigest()
        return encode_answer(Extracted(digest, PAGES, ["ab"] * PAGES, {}, False))
    finally:
        wire.MAX_ANSWER_PAGES = cap


def many_pages(data: bytes) -> list[str]:
    from django_pdfpool.sandbox.engines import WARM_UP_PDF

    if data == WARM_UP_PDF:  # the template's rehearsal, before it forks anyone
        return ["warm"]
    os.write(1, hostile_answer(data))
    os._exit(0)
