"""An engine whose child answers at once and then stays alive, as code run by a hostile PDF
could: it writes a complete answer line itself and sleeps, named ``NAME`` (``/proc/PID/comm``)
meanwhile. Its one page is the child's pid."""

from __future__ import annotations

import hashlib
import os
import time

ENGINE = "tests.support.lingering:answer_then_stay"
NAME = b"pdfpool-linger"


def answer_then_stay(data: bytes) -> list[str]:
    from django_pdfpool.sandbox.child_main import set_name
    from django_pdfpool.sandbox.engines import WARM_UP_PDF
    from django_pdfpool.sandbox.wire import Extracted, encode_answer

    pid = str(os.getpid())
    if data == WARM_UP_PDF:  # the template's rehearsal, before it forks anyone
        return [pid]
    answer = Extracted(hashlib.sha256(data).hexdigest(), 1, [pid], {}, False)
    set_name(NAME)
    os.write(1, encode_answer(answer))
    time.sleep(120)
    return [pid]


SILENT_ENGINE = "tests.support.lingering:close_then_stay"


def close_then_stay(data: bytes) -> list[str]:
    """Ends its output without an answer, then stays alive: only the deadline ends it."""
    from django_pdfpool.sandbox.engines import WARM_UP_PDF

    if data != WARM_UP_PDF:
        os.close(1)
        time.sleep(120)
    return [str(os.getpid())]
