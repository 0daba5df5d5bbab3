"""How the example answers refusals: JSON for the API, the upload page for people.

``@pdf_pooled`` answers a refusal (503, 429), an unreadable PDF (422), a missing or
oversized upload (400, 413) itself, through its ``answer=`` function. The API uses
``json_answer`` (JSON whatever the client accepts); the page uses its own, which shows
a friendly message on the upload page itself, with the retry time.
"""

from __future__ import annotations

from typing import Any

from django_pdfpool.responses import TITLES, Failure, describe

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


def problem(exception: Failure) -> dict[str, Any]:
    """The template's ``problem``: what went wrong, in words for people, and when to retry."""
    said = describe(exception)
    return {
        "status": said.status,
        "code": said.code,
        "title": TITLES.get(said.status, "Something went wrong"),
        "message": FRIENDLY.get(said.code) or said.message or "Please try again.",
        "retry_after": said.retry_after,
        "kind": "busy" if said.status in (429, 503) else "error",
    }
