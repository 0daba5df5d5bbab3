"""Django app configuration for django-pdfpool."""

import logging

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

#: Seconds added to WAIT + TIMEOUT before a staged copy without a pid counts as stale.
STALE_MARGIN = 60.0


class PdfPoolConfig(AppConfig):
    """The ``django_pdfpool`` app: its checks and settings hooks load when Django is ready,
    and staged copies left by dead processes are deleted."""

    name = "django_pdfpool"
    verbose_name = "PDF pool"

    def ready(self) -> None:
        from . import checks, conf  # noqa: F401 - registers the checks and the settings reset

        sweep_stale_uploads()


def sweep_stale_uploads() -> list[str]:
    """Delete the staged copies of dead processes in FILE_UPLOAD_TEMP_DIR (``uploads.sweep``)."""
    from .conf import get_settings
    from .uploads import sweep

    try:
        conf = get_settings()
    except ImproperlyConfigured:
        return []  # the checks say what is wrong; nothing is staged with bad settings
    older_than = None if conf.wait is None else conf.wait + conf.timeout + STALE_MARGIN
    removed = sweep(conf.temp_dir, older_than)
    if removed:
        logging.getLogger("django_pdfpool").info(
            "removed %d staged upload(s) left by processes that ended", len(removed)
        )
    return removed
