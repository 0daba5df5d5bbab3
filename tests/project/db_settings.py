"""The test project with the contrib routes on a SQLite file (``PDFPOOL_TEST_DB``): for
servers whose database connections a test counts."""

import os

from .contrib_settings import *  # noqa: F403

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["PDFPOOL_TEST_DB"]}
}
