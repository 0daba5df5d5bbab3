"""URLs of the contrib tests: the test project's, with DRF and django-ninja routes."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from tests.project import contrib_views as views
from tests.project.urls import urlpatterns as project

router = SimpleRouter()
router.register("drf/documents", views.Documents, basename="documents")

urlpatterns = [
    *project,
    path("drf/apiview/held/", views.HeldAPIView.as_view()),
    path("drf/apiview/session/", views.SessionHeldAPIView.as_view()),
    path("drf/apiview/versioned/", views.VersionedHeldAPIView.as_view()),
    path("drf/apiview/extract/", views.ExtractAPIView.as_view()),
    path("drf/apiview/default-parsers/", views.DefaultParsersAPIView.as_view()),
    path("drf/function/held/", views.held_function),
    path("drf/function/gated/", views.gated_function),
    path("drf/function/admins/", views.admins_function),
    path("drf/function/throttled/", views.throttled_function),
    path("drf/function/titled/", views.titled_function),
    *router.urls,
    path("ninja/", views.api.urls),
    path("ninja-guarded/", views.guarded.urls),
]
