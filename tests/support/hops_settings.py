"""The example's settings with the load benchmark's pages (``/bench/health/``), for
tests/support/count_hops.py; ``BENCH_MIDDLEWARE=classic``: Django's and WhiteNoise's
middleware as they ship (sync hooks, a hand-off at each), the count's control."""

import os

from demo.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.variants"

if os.environ.get("BENCH_MIDDLEWARE") == "classic":
    MIDDLEWARE = [
        "django.middleware.security.SecurityMiddleware",
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
        "django_pdfpool.middleware.AdmissionMiddleware",
    ]
    WHITENOISE_USE_FINDERS = True
