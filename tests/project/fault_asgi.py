"""The fault suite's ASGI application: the test project with the fault endpoints, and
``PoolLifespan``'s drain timeout from ``FAULTS_DRAIN_TIMEOUT`` (seconds; unset: default)."""

import os

from django.core.asgi import get_asgi_application

from django_pdfpool.asgi import PoolLifespan

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.project.fault_settings")

_timeout = os.environ.get("FAULTS_DRAIN_TIMEOUT")
application = PoolLifespan(
    get_asgi_application(), drain_timeout=None if _timeout is None else float(_timeout)
)
