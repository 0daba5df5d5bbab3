"""Django app configuration for django-pdfpool."""

from django.apps import AppConfig


class PdfPoolConfig(AppConfig):
    """The ``django_pdfpool`` app: its checks and settings hooks load when Django is ready."""

    name = "django_pdfpool"
    verbose_name = "PDF pool"

    def ready(self) -> None:
        from . import checks, conf  # noqa: F401 - registers the checks and the settings reset
