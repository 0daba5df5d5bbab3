"""The path the given conformance test imports: the in-process pool and its refusals, whose
homes are ``django_pdfpool.admission`` and ``django_pdfpool.exceptions``."""

from .admission.local import Pool
from .exceptions import CallerBusy, PoolBusy, PoolClosed

__all__ = ["CallerBusy", "Pool", "PoolBusy", "PoolClosed"]
