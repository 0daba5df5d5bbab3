"""Django app configuration for django-pdfpool."""

from django.apps import AppConfig


class PdfPoolConfig(AppConfig):
    name = "django_pdfpool"
    verbose_name = "PDF pool"

    def ready(self) -> None:
        from . import checks, conf  # noqa: F401 - registers the checks and the settings reset
