"""The path the given conformance test imports (tests/test_pool_conformance.py, kept as it
was given): the in-process pool and the refusals its rules raise. Their homes are
``django_pdfpool.admission`` and ``django_pdfpool.exceptions``."""

from .admission.local import Pool
from .exceptions import CallerBusy, PoolBusy, PoolClosed

__all__ = ["CallerBusy", "Pool", "PoolBusy", "PoolClosed"]
