"""The contrib routes behind the door (tests/e2e/test_contrib_servers.py)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.project.contrib_settings")

from django.core.asgi import get_asgi_application

from django_pdfpool import PdfPoolDoor, PoolLifespan

application = PdfPoolDoor(PoolLifespan(get_asgi_application()))
