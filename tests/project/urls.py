"""URLs for the test suite."""

from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("sync/", views.sync_extract),
    path("async/", views.async_extract),
    path("cbv/sync/", views.SyncClassView.as_view()),
    path("cbv/async/", views.AsyncClassView.as_view()),
    path("held/sync/", views.sync_held),
    path("held/async/", views.async_held),
    path("direct/sync/", views.sync_direct),
    path("direct/async/", views.async_direct),
    path("plain/", views.plain),
    path("json-only/", views.json_only),
    path("own-answers/", views.own_answers),
    path("snapshot/", views.snapshot),
    path("counted/sync/", views.sync_counted),
    path("counted/async/", views.async_counted),
    path("counted/extract/sync/", views.sync_counted_extract),
    path("counted/extract/async/", views.async_counted_extract),
    path("gated/", views.gated),
    path("threaded/", views.threaded),
    path("orphaned/", views.orphaned),
    path("stored/sync/", views.sync_stored),
    path("stored/async/", views.async_stored),
]
