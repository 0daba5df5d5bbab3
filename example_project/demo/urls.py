"""The example's URLs: the upload page, its JSON API, and the admin (with the pool status)."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import path, re_path
from django.views.generic import RedirectView
from uploads import views

admin.site.site_header = "django-pdfpool demo"
admin.site.site_title = "django-pdfpool demo"

urlpatterns = [
    path("", views.index, name="index"),
    path("api/extract/", views.api_extract, name="api-extract"),
    re_path(r"^api/jobs/(?P<sha256>[0-9a-f]{64})/$", views.job_state, name="job-state"),
    path("admin/", admin.site.urls),
    # the admin's pages name no icon, so browsers ask for this one (not permanent: other
    # projects are served on this port too)
    path("favicon.ico", RedirectView.as_view(url=static("uploads/favicon.svg"))),
]
