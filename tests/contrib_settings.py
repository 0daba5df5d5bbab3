"""The test settings with the contrib routes (DRF and django-ninja), for the servers of
tests/test_contrib_servers.py."""

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "rest_framework"]  # noqa: F405
ROOT_URLCONF = "tests.contrib_urls"
REST_FRAMEWORK = {"EXCEPTION_HANDLER": "tests.contrib_views.handled"}
