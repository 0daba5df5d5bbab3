"""The test project as a WSGI application, for the real WSGI server test (gunicorn)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.project.settings")

application = get_wsgi_application()
