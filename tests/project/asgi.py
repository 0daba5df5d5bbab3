"""The test project as an ASGI application, for the uvicorn end-to-end tests."""

import os

from django.core.asgi import get_asgi_application

from django_pdfpool import PoolLifespan

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.project.settings")

application = PoolLifespan(get_asgi_application())
