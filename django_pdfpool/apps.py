"""Django app configuration for django-pdfpool."""

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

STALE_MARGIN = 60.0  # seconds past WAIT + TIMEOUT after which a copy named without a pid is stale


class PdfPoolConfig(AppConfig):
    """Registers the checks and the settings reset, and deletes the staged copies left by
    processes that ended (``uploads.sweep``)."""

    name = "django_pdfpool"
    verbose_name = "PDF pool"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the checks (and conf its reset)
        from .conf import get_settings
        from .uploads import sweep

        try:
            conf = get_settings()
        except ImproperlyConfigured:
            return  # the checks say what is wrong; nothing is staged with bad settings
        sweep(conf.temp_dir, None if conf.wait is None else conf.wait + conf.timeout + STALE_MARGIN)
