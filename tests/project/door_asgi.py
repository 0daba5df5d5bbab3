"""The test project behind the door, as the example serves it: for the end-to-end tests
of admission before the body (tests/e2e/test_door_servers.py)."""

import os

from django.core.asgi import get_asgi_application

from django_pdfpool import KeptThreads, PdfPoolDoor, PoolLifespan

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.project.settings")

application = PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))
