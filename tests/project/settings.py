"""Django settings for the test suite."""

import json
import os

SECRET_KEY = "django-pdfpool-tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pdfpool",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_pdfpool.middleware.AdmissionMiddleware",
]
ROOT_URLCONF = "tests.project.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Servers started by the end-to-end tests take their settings from the environment: PDFPOOL,
# where uploads are staged, and cold children unless asked (tests/support/servers.py).
PDFPOOL = json.loads(os.environ.get("PDFPOOL_JSON", "{}"))
FILE_UPLOAD_TEMP_DIR = os.environ.get("PDFPOOL_TEST_STAGED") or None
if "PDFPOOL_TEST_WARM" in os.environ:
    from django_pdfpool.sandbox import configure

    configure(warm=os.environ["PDFPOOL_TEST_WARM"] == "1")
