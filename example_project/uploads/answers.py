"""How the example answers refusals: JSON for the API, the upload page for people.

``@pdf_pooled`` answers a refusal (503, 429), an unreadable PDF (422), a missing or
oversized upload (400, 413) itself, through its ``answer=`` function. The API uses
``json_answer`` (JSON whatever the client accepts); the page uses its own, which shows
a friendly message on the upload page itself, with the retry time.
"""

from __future__ import annotations

import math
from typing import Any

from django_pdfpool.responses import TITLES

# What people read for the pool's refusals; an unreadable PDF's own message is
# already meant for users. The page's script shows the same texts (json_script).
FRIENDLY = {
    "busy": "The server is busy with other PDFs and could not take yours in time.",
    "caller_busy": "You already have a PDF being extracted: wait until it is done.",
    "closed": "The server is restarting and takes no new PDFs for a moment.",
}


def friendly_texts() -> dict[str, dict[str, str]]:
    """Titles by status and messages by code, for the template and for the script."""
    titles = {str(status): title for status, title in TITLES.items()}
    return {"titles": titles, "messages": FRIENDLY}


def problem(status: int, code: str, message: str, retry_after: float | None) -> dict[str, Any]:
    """The template's ``problem``: what went wrong, in words for people, and when to retry."""
    seconds = None if retry_after is None else max(1, math.ceil(retry_after))
    return {
        "status": status,
        "code": code,
        "title": TITLES.get(status, "Something went wrong"),
        "message": FRIENDLY.get(code) or message or "Please try again.",
        "retry_after": seconds,
        "kind": "busy" if status in (429, 503) else "error",
    }
