"""Settings of the load benchmark's server: the example project's, with the benchmark's URLs.

Everything else (middleware, PDFPOOL from the environment, logging) is the example's, so the
three variants in ``benchmarks/variants.py`` run behind exactly what the example runs behind.
"""

from demo.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.variants"
