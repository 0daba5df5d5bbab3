"""The peer Django teams reach for first: a Celery task per upload, pypdf in the worker's
child, Celery's own limits (``worker_max_memory_per_child``: MEMORY_LIMIT; soft and hard time
limits: TIMEOUT); no sharing, no bound on the queue. bench_load.py starts a prefork worker
(``--concurrency`` SLOTS) and a redis-server (``BENCH_CELERY_URL``)."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

TIMEOUT = 30.0  # PDFPOOL's default TIMEOUT
MEMORY_LIMIT_KIB = 512 * 1024  # PDFPOOL's default MEMORY_LIMIT
PAGE_SEPARATOR = "\n\n"

app = Celery("pdfpool_bench", broker=os.environ.get("BENCH_CELERY_URL", "redis://127.0.0.1/0"))
app.conf.update(
    result_backend=app.conf.broker_url,
    worker_max_memory_per_child=MEMORY_LIMIT_KIB,
    task_time_limit=TIMEOUT + 5,
    task_soft_time_limit=TIMEOUT,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    result_expires=600,
)


@app.task
def extract_text(path: str) -> dict[str, Any]:
    """The upload's text, read by pypdf in this worker's process, or an error code."""
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # as quiet as the pool's child
    try:
        reader = PdfReader(path)
        pages = [page.extract_text() for page in reader.pages]
    except SoftTimeLimitExceeded:
        return {"error": "timeout"}
    except Exception:
        return {"error": "not_a_pdf"}
    return {"page_count": len(pages), "text": PAGE_SEPARATOR.join(pages)}
