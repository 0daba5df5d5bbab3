"""docs/deployment.md's LOGGING, configured as Django configures it (over its default
logging, in a process of its own): a refused upload (503) mails the admins nothing, and a
server error (500) mails them once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_docs import fences_of

ROOT = Path(__file__).resolve().parents[1]

PROJECT = """
import json
import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    ADMINS=[("Admin", "admin@example.com")],
    LOGGING=LOGGING,
    EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="a key of no importance",
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_pdfpool"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    MIDDLEWARE=[],
)
django.setup()

from django.core import mail
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import path

from django_pdfpool import get_pool, pdf_pooled


@pdf_pooled
def extract(request):
    raise AssertionError("the pool is closed: the view never runs")


def broken(request):
    raise RuntimeError("a server error")


urlpatterns = [path("extract/", extract), path("broken/", broken)]
mail.outbox = []
get_pool().close()
client = Client(raise_request_exception=False)
upload = SimpleUploadedFile("a.pdf", b"%PDF-1.4 a body", content_type="application/pdf")
refused = client.post("/extract/", {"file": upload}).status_code
after_refusal = len(mail.outbox)
failed = client.get("/broken/").status_code
print(json.dumps([refused, after_refusal, failed, len(mail.outbox) - after_refusal]))
"""


def test_a_refusal_mails_nobody_and_an_error_mails_the_admins_once(tmp_path: Path) -> None:
    (block,) = [
        b.body for b in fences_of(ROOT / "docs" / "deployment.md").blocks if "LOGGING" in b.body
    ]
    script = tmp_path / "logged.py"
    script.write_text(block + "\n" + PROJECT)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refused, mails_for_refusal, failed, mails_for_error = json.loads(done.stdout.splitlines()[-1])
    assert (refused, failed) == (503, 500)
    assert mails_for_refusal == 0
    assert mails_for_error == 1
