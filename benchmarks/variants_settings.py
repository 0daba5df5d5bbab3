"""Settings of the load benchmark's server: the example project's, with the benchmark's URLs.

Everything else (middleware, PDFPOOL from the environment, logging) is the example's, so the
three variants in ``benchmarks/variants.py`` run behind exactly what the example runs behind.
"""

from demo.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.variants"

# Diagnostic variants of bench_load.py (issue 24): the same server with no Django middleware
# at all (``BENCH_MIDDLEWARE=none``), or with the interpreter's GIL switch interval changed
# (``BENCH_SWITCH_INTERVAL`` seconds), to tell the middleware's thread hops from the GIL's.
import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

if _os.environ.get("BENCH_MIDDLEWARE") == "none":
    MIDDLEWARE: list[str] = []
if _interval := _os.environ.get("BENCH_SWITCH_INTERVAL"):
    _sys.setswitchinterval(float(_interval))
