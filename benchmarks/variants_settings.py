"""Settings of the load benchmark's server: the example project's, with the benchmark's URLs.

Everything else (middleware, PDFPOOL from the environment, logging) is the example's, so the
three variants in ``benchmarks/variants.py`` run behind exactly what the example runs behind.
"""

from demo.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.variants"

# Diagnostic variants of bench_load.py (issue 24): the same server with no Django middleware
# at all (``BENCH_MIDDLEWARE=none``), with Django's and WhiteNoise's middleware as they ship
# (``BENCH_MIDDLEWARE=classic``: the example before issue 24's fix), or with the
# interpreter's GIL switch interval changed (``BENCH_SWITCH_INTERVAL`` seconds), to tell
# the middleware's thread hops from the GIL's.
import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

if _os.environ.get("BENCH_MIDDLEWARE") == "none":
    MIDDLEWARE: list[str] = []
elif _os.environ.get("BENCH_MIDDLEWARE") == "classic":  # the example before issue 24's fix
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
if _interval := _os.environ.get("BENCH_SWITCH_INTERVAL"):
    _sys.setswitchinterval(float(_interval))

# ``door-nogc``: the cyclic garbage collector off (gc.disable), to tell whether its full
# collections are the health page's tail
if _os.environ.get("BENCH_NO_GC"):
    import gc as _gc

    _gc.disable()

# ``BENCH_LAGWATCH=FILE``: how late a sleeping thread of the server wakes (benchmarks/lagwatch.py)
if _watched := _os.environ.get("BENCH_LAGWATCH"):
    from benchmarks.lagwatch import start as _start_watch

    _start_watch(_watched)

# ``BENCH_SLOW_CALLBACKS=FILE``: every event-loop callback over 1 ms, timed (benchmarks/slowcb.py)
if _slow := _os.environ.get("BENCH_SLOW_CALLBACKS"):
    from benchmarks.slowcb import install as _install_slow

    _install_slow(_slow)
