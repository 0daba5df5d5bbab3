"""``manage.py ensure_demo_admin``: the demo's admin user, with a generated password.

First run: creates the superuser with a password from ``secrets.token_urlsafe`` and
keeps that password in ``settings.ADMIN_PASSWORD_FILE`` (git-ignored, owner-only).
Every run: prints the username, the password and the URLs to open, so that a second
``make demo`` says the same as the first. There is no fixed password anywhere; if
the file is lost the password is replaced by a new generated one, and if someone
changed the password since, it is left alone and not shown.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create the demo's admin user if missing (generated password) and print how to sign in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--base-url", default="http://127.0.0.1:8000", help="where the demo will be served"
        )

    def handle(self, *args: Any, username: str, base_url: str, **options: Any) -> None:
        path = Path(settings.ADMIN_PASSWORD_FILE)
        User = get_user_model()
        user = User._default_manager.filter(username=username).first()
        stored = path.read_text().strip() if path.exists() else None
        if user is None or stored is None:
            password = stored or secrets.token_urlsafe(16)
            _write_private(path, password)  # first: a password that works is never lost
            if user is None:
                User._default_manager.create_superuser(username, email="", password=password)
                done = f"Created the admin user {username!r} with a generated password."
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
                done = f"{path.name} was missing: gave {username!r} a new generated password."
            self.stdout.write(self.style.SUCCESS(done))
        elif user.check_password(stored):
            password = stored
            self.stdout.write(f"The admin user {username!r} exists (password kept in {path}).")
        else:
            password = "(changed since it was generated; `manage.py changepassword` resets it)"
            self.stdout.write(f"The admin user {username!r} exists.")
        base = base_url.rstrip("/")
        self.stdout.write(
            "\n"
            f"  Upload a PDF:   {base}/\n"
            f"  Pool status:    {base}/admin/django_pdfpool/poolstatus/\n"
            f"  Admin sign-in:  {username} / {password}\n"
            f"  JSON API:       curl -H 'X-Requested-With: curl' -F file=@document.pdf "
            f"{base}/api/extract/\n"
        )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text + "\n")
