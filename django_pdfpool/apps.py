"""Django app configuration for django-pdfpool."""

from django.apps import AppConfig


class PdfPoolConfig(AppConfig):
    name = "django_pdfpool"
    verbose_name = "PDF pool"
