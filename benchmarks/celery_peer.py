"""The peer a Django team reaches for first: a Celery task per upload, the view waiting for
its result. A real worker (prefork, ``--concurrency`` SLOTS) and a real redis-server as broker
and result backend (bench_load.py starts both; ``BENCH_CELERY_URL`` names the server). The
task runs pypdf in the worker's child, with Celery's own limits: ``worker_max_memory_per_child``
(MEMORY_LIMIT: a child over it is replaced after its task) and hard and soft time limits
(TIMEOUT). Nothing is shared between identical uploads and the queue has no bound."""

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
