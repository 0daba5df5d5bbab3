"""App configuration of the example's upload page."""

from django.apps import AppConfig


class UploadsConfig(AppConfig):
    name = "uploads"
    verbose_name = "Uploads"
