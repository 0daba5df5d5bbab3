"""The test settings with the contrib routes (DRF and django-ninja), for the servers of
tests/e2e/test_contrib_servers.py."""

from tests.project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "rest_framework"]  # noqa: F405
ROOT_URLCONF = "tests.project.contrib_urls"
REST_FRAMEWORK = {"EXCEPTION_HANDLER": "tests.project.contrib_views.handled"}
