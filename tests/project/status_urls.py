"""The test URLs plus the optional Prometheus endpoint, which a project must route itself."""

from django.urls import path

from django_pdfpool import metrics_view
from tests.project.urls import urlpatterns as base

urlpatterns = [*base, path("metrics/", metrics_view)]
