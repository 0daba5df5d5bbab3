"""The status page's ModelAdmin (admin.py) as Django's admin has a project use it: on a site
of its own, mounted anywhere, under i18n_patterns, its template chosen as a ModelAdmin's."""

from __future__ import annotations

import pytest
from django.conf.urls.i18n import i18n_patterns
from django.contrib import admin
from django.urls import path

from django_pdfpool.admin import PoolStatusAdmin
from django_pdfpool.models import PoolStatus
from tests.status import test_page
from tests.status.test_page import client_for

pytestmark = pytest.mark.django_db
users = test_page.users  # the fixture: one user per row of the permission matrix

OPS_TEMPLATE = (
    '{% extends "admin/django_pdfpool/status.html" %}'
    "{% block content %}<p>ops page</p>{{ block.super }}{% endblock %}"
)


class OwnTemplate(PoolStatusAdmin):
    change_list_template = "ops/status.html"


ops = admin.AdminSite(name="ops")
ops.register(PoolStatus, OwnTemplate)
urlpatterns = i18n_patterns(path("ops/", ops.urls))  # ROOT_URLCONF for the tests below
URL = "/en/ops/django_pdfpool/poolstatus/"


@pytest.fixture
def ops_site(settings):
    settings.ROOT_URLCONF = __name__
    settings.MIDDLEWARE = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.locale.LocaleMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ]
    engine = settings.TEMPLATES[0]
    settings.TEMPLATES = [
        {
            **engine,
            "APP_DIRS": False,
            "OPTIONS": {
                **engine["OPTIONS"],
                "loaders": [
                    ("django.template.loaders.locmem.Loader", {"ops/status.html": OPS_TEMPLATE}),
                    "django.template.loaders.app_directories.Loader",
                ],
            },
        }
    ]


@pytest.mark.parametrize(
    ("who", "expected"),
    [("anonymous", 302), ("non_staff", 302), ("staff", 403), ("superuser", 200)],
)
def test_a_site_of_its_own_under_a_language_prefix_admits_as_the_admin_does(
    pdfpool, ops_site, users, who, expected
):
    response = client_for(users[who]).get(URL)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"] == f"/en/ops/login/?next={URL}"
    if expected == 200:
        page = response.content.decode()
        assert 'href="/en/ops/django_pdfpool/"' in page  # the breadcrumbs stay on this site
        assert 'data-json-url="?format=json"' in page
        assert client_for(users[who]).get(URL, {"format": "json"}).status_code == 200


def test_the_change_list_template_of_a_subclass_is_the_page_it_renders(pdfpool, ops_site, users):
    response = client_for(users["superuser"]).get(URL)
    assert response.status_code == 200
    assert "<p>ops page</p>" in response.content.decode()
    assert 'id="pdfpool-status"' in response.content.decode()
