"""Settings of the load benchmark's server: the example project's, with the benchmark's URLs
(``benchmarks/variants.py``); middleware, PDFPOOL from the environment and logging are the
example's, so every variant runs behind exactly what the example runs behind."""

from demo.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.variants"
